// Every step of the report has a deadline: a step that fails or overruns is a row with its
// reason, never a hang. Steps that could hang inside native code (the Vulkan loader, a GPU
// session) run in a child process that is killed at its deadline.
import { execFile } from 'node:child_process';
import { crashReason } from '../../src/lib/stderr-error.js';
import { fileURLToPath } from 'node:url';

export type Outcome<T> = { ok: true; value: T; ms: number } | { ok: false; reason: string; ms: number };

export const firstLine = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0].trim();

/** fn's value, or why not: its error, or that it ran past `ms` (it is then left to its `late`
 *  hook, which ends what it started). */
export async function within<T>(
  ms: number,
  what: string,
  fn: () => Promise<T>,
  late?: () => unknown,
): Promise<Outcome<T>> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const overrun = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => {
        late?.();
        reject(new Error(`${what}: no result within ${Math.round(ms / 1000)} s`));
      },
      Math.max(0, ms),
    );
  });
  try {
    const value = await Promise.race([fn(), overrun]);
    return { ok: true, value, ms: Math.round(performance.now() - started) };
  } catch (err) {
    return { ok: false, reason: firstLine(err), ms: Math.round(performance.now() - started) };
  } finally {
    clearTimeout(timer);
  }
}

const PROBE = fileURLToPath(new URL('./probe.js', import.meta.url));

/** The JSON lines a probe child (probe.ts) printed, killed at `ms`; what it printed before
 *  failing or overrunning is kept, with the reason. */
export function probe(
  args: string[],
  env: Record<string, string>,
  ms: number,
): Promise<{ lines: unknown[]; error: string | null }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [PROBE, ...args],
      { env: { ...process.env, ...env }, timeout: ms, killSignal: 'SIGKILL', maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        const lines = stdout
          .split('\n')
          .filter((l) => l.startsWith('{') || l.startsWith('[') || l === 'null')
          .map((l) => JSON.parse(l) as unknown);
        const error = !err
          ? null
          : err.killed
            ? `no result within ${Math.round(ms / 1000)} s (killed)`
            : (crashReason(stderr) ?? firstLine(err));
        resolve({ lines, error });
      },
    );
  });
}
