// The tile-infer command as a user runs it, as a child process.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './server.js';

export interface Run {
  code: number | null;
  stderr: string;
}

/** Runs tile-infer with `args`; `onStart` sees the process while it runs. Through sh, so that
 *  tap's spawn hooks cannot put their loaders back into NODE_OPTIONS. */
export function tileInfer(args: string[], onStart?: (proc: ReturnType<typeof spawn>) => void): Promise<Run> {
  const proc = spawn('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, join(ROOT, 'dist/src/client/tile-infer.js'), ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  onStart?.(proc);
  return new Promise((resolve) => proc.once('exit', (code) => resolve({ code, stderr })));
}
