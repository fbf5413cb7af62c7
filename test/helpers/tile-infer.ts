// tile-infer as a user runs it: the built command as a child process. TILE_INFER_BIN runs another
// build's command instead (to check that a test fails on an older checkout).
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ROOT } from './server.js';
import type { SlideSpec } from '../../tools/synthetic/slide.js';

export const TILE_INFER = process.env.TILE_INFER_BIN ?? join(ROOT, 'dist/src/client/tile-infer.js');

export interface Run {
  code: number | null;
  stderr: string;
  seconds: number;
}

/** `tile-infer slide` as the e2e files run it: INPUTS through `model` on `server`, results in
 *  `out`, 4 tiles in flight, then `extra`. */
export const slideCommand = (
  inputs: string[],
  { model, out, server }: { model: string; out: string; server: string },
  extra: string[] = [],
): string[] => ['slide', ...inputs, '--model', model, '--out', out, '--server', server, '--concurrency', '4', ...extra];

/** Runs tile-infer with `args`; `onStart` sees the process while it runs.
 *  `fileModesBind`: run without the capabilities that let root pass file modes (a test as root
 *  would otherwise write into a folder of mode 0555). Dropping them, not switching to nobody,
 *  keeps the run able to reach a node and a checkout that live in root's 0700 temp folders. */
export function tileInfer(
  args: string[],
  options: {
    env?: NodeJS.ProcessEnv;
    onStart?: (proc: ChildProcess) => void;
    timeoutMs?: number;
    fileModesBind?: boolean;
  } = {},
): Promise<Run> {
  const started = performance.now();
  const shell = ['/bin/sh', '-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, TILE_INFER, ...args];
  const command =
    options.fileModesBind && process.getuid?.() === 0
      ? ['setpriv', '--bounding-set=-dac_override,-dac_read_search,-fowner', ...shell]
      : shell;
  const proc = spawn(command[0], command.slice(1), {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  options.onStart?.(proc);
  const timer = options.timeoutMs ? setTimeout(() => proc.kill('SIGKILL'), options.timeoutMs) : null;
  return new Promise((resolve) =>
    proc.once('exit', (code) => {
      if (timer) clearTimeout(timer);
      resolve({ code, stderr, seconds: (performance.now() - started) / 1000 });
    }),
  );
}

/** Every output file under a folder, relative path to bytes; the journal and summaries aside
 *  (summaries hold seconds). */
export function outputs(folder: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (name === '.journal' || /^summary.*\.csv$/.test(name)) continue;
      if (statSync(p).isDirectory()) walk(p);
      else files.set(relative(folder, p), readFileSync(p));
    }
  };
  walk(folder);
  return files;
}

/** The rows of a summary CSV (no quoted commas in the columns read here but the last). */
export function summaryRows(path: string): { slide: string; status: string; tiles: number; reason: string }[] {
  const [, ...lines] = readFileSync(path, 'utf8').trim().split('\n');
  return lines.map((line) => {
    const [slide, status, tiles, , ...reason] = line.split(',');
    return { slide, status, tiles: Number(tiles), reason: reason.join(',') };
  });
}

/** A port nothing listens on now (a server that must come back on the same port uses it). */
export { freePort } from '../../tools/remote-servers.js';

/** A small slide of one tissue island (700 x 500 um at 0.5 um/px, TIFF), seeded: quick to write
 *  and to run, for the checks of what tile-infer says and writes. */
export const smallSlide = (seed: number, extra: Partial<SlideSpec> = {}): SlideSpec => ({
  widthUm: 700,
  heightUm: 500,
  mpp: 0.5,
  seed,
  format: 'tiff',
  islands: [{ cx: 350, cy: 250, rx: 260, ry: 180 }],
  ...extra,
});
