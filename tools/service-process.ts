// Starts a built service (`node <root>/dist/supervisor/main.js`) as a child process on a free port
// with its own config and data folder, and waits until it listens. Used by the tests and the
// benchmark alike; `root` lets the benchmark run an older checkout beside this one.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { SET_HERE } from '../src/lib/onnxruntime-telemetry.js';
import { crashReason } from '../src/lib/stderr-error.js';
import { tempDir } from './temp-dir.js';

export const ROOT = new URL('../../', import.meta.url).pathname;

/** A configuration file (config/default.json unless named) as a service to measure: the models
 *  of the checkout at `root` (another checkout's code runs its own packages), any free port on
 *  loopback whatever the file says (another service may hold its port), no drain delay (nothing
 *  balances it, and it is stopped once per run). */
export function shippedConfig(file = join(ROOT, 'config/default.json'), root = ROOT): Record<string, unknown> {
  return {
    ...JSON.parse(readFileSync(file, 'utf8')),
    host: '127.0.0.1',
    port: 0,
    model_repository: join(root, 'models'),
    supervisor: { drain_delay_ms: 0 },
  };
}

export interface ServiceProcess {
  url: string;
  proc: ChildProcess;
  dir: string;
  /** Every line the supervisor printed, parsed when JSON. */
  lines: Record<string, unknown>[];
  /** What it printed on stderr so far. */
  stderr: () => string;
  exited: Promise<number | null>;
}

/** The environment without tap's loaders (NODE_OPTIONS) and bookkeeping, which would otherwise
 *  be inherited by the service and every process it forks, and without the telemetry opt-out
 *  this process set for itself (a service sets its own; an older checkout's runs as it would). */
export function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => k !== 'NODE_OPTIONS' && !k.startsWith('TAP') && !k.startsWith('_TAPJS') && !SET_HERE.includes(k),
    ),
  );
}

export interface SpawnOptions {
  env?: Record<string, string>;
  /** Another built checkout to run. */
  root?: string;
  /** The open-file limit of the service's processes (ulimit -n). */
  fdLimit?: number;
  /** Start it as the README does, with `npm start`: `proc` is then the npm process. */
  npmStart?: boolean;
}

export async function spawnService(
  config: Record<string, unknown>,
  options: SpawnOptions = {},
): Promise<ServiceProcess> {
  const root = options.root ?? ROOT;
  const dir = tempDir('tile-service');
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ host: '127.0.0.1', port: 0, data_dir: join(dir, 'data'), ...config }),
  );
  // Through sh, so that tap's spawn hooks cannot put their loaders back into NODE_OPTIONS.
  const limit = options.fdLimit ? `ulimit -n ${options.fdLimit}; ` : '';
  const command = options.npmStart ? ['npm', 'start'] : [process.execPath, join(root, 'dist/supervisor/main.js')];
  const proc = spawn('/bin/sh', ['-c', `${limit}unset NODE_OPTIONS; exec "$0" "$@"`, ...command], {
    cwd: root,
    env: { ...cleanEnv(), CONFIG: join(dir, 'config.json'), LOG_FILE: join(dir, 'service.log'), ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line);
      } catch {
        entry = { raw: line };
      }
      lines.push(entry);
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(String(entry.msg ?? ''));
      if (match) resolve(match[1]);
    });
    // Its reason first (the line a report keeps), then all it said.
    void exited.then((code) =>
      reject(new Error(`server exited with ${code} before listening: ${crashReason(stderr) ?? ''}\n${stderr}`)),
    );
  });
  return { url, proc, dir, lines, stderr: () => stderr, exited };
}

export async function waitFor(predicate: () => Promise<boolean> | boolean, timeoutMs = 30000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (
      await Promise.resolve()
        .then(predicate)
        .catch(() => false)
    )
      return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`condition not met within ${timeoutMs} ms`);
}
