// Load and state probes for the end-to-end tests against a real service.
import type { TestServer } from './server.js';
import { tileRequest } from './tiles.js';

export type Json = Record<string, any>;

export async function workers(server: TestServer): Promise<Json[]> {
  return ((await (await server.get('/diagnostics')).json()) as Json).workers;
}
export async function pidOf(server: TestServer, id: string): Promise<number> {
  return (await workers(server)).find((w) => w.id === id)!.pid;
}

/** Runs `concurrency` request loops until stopped; collects every status and body (status 0:
 *  the connection failed). */
export function load(server: TestServer, path: string, png: Buffer, concurrency: number) {
  const results: { status: number; body: Json; at: number }[] = [];
  let running = true;
  const loops = Array.from({ length: concurrency }, async () => {
    while (running) {
      try {
        const res = await server.post(path, tileRequest(png));
        results.push({ status: res.status, body: (await res.json()) as Json, at: Date.now() });
      } catch (err) {
        results.push({ status: 0, body: { error: String((err as Error).cause ?? err) }, at: Date.now() });
      }
    }
  });
  return {
    results,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      return results;
    },
  };
}
