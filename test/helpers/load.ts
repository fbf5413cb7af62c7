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

/** A request still unanswered this long is recorded as status -1 and its loop goes on: a hang
 *  fails the test's assertions instead of its timeout. */
const UNANSWERED_MS = 30_000;

/** Runs `concurrency` request loops until stopped; collects every status and body (status 0:
 *  the connection failed; -1: no answer). */
export function load(server: TestServer, path: string, png: Buffer, concurrency: number) {
  const results: { status: number; body: Json; at: number }[] = [];
  let running = true;
  const loops = Array.from({ length: concurrency }, async () => {
    while (running) {
      try {
        const answer = server
          .post(path, tileRequest(png))
          .then(async (res) => ({ status: res.status, body: (await res.json()) as Json }));
        let timer: NodeJS.Timeout | undefined;
        const silence = new Promise<{ status: number; body: Json }>((resolve) => {
          timer = setTimeout(
            () => resolve({ status: -1, body: { error: `no answer in ${UNANSWERED_MS} ms` } }),
            UNANSWERED_MS,
          );
        });
        results.push({ ...(await Promise.race([answer, silence]).finally(() => clearTimeout(timer))), at: Date.now() });
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
