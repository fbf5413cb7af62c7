// Starts the real service (`node dist/supervisor/main.js`) as a child process on a free port,
// with its own config, data folder and log file, and talks HTTP to it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const ROOT = new URL('../../../', import.meta.url).pathname;
export const MODELS = join(ROOT, 'models');

export interface ModelConfig {
  name: string;
  path?: string;
  [key: string]: unknown;
}

export interface ServerOptions {
  models?: ModelConfig[];
  config?: Record<string, unknown>;
  env?: Record<string, string>;
  /** Wait until /health/ready answers 200 (default true). */
  waitReady?: boolean;
}

export interface TestServer {
  url: string;
  proc: ChildProcess;
  dir: string;
  logFile: string;
  /** Every line the supervisor printed, parsed when JSON. */
  lines: Record<string, unknown>[];
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Response>;
  get(path: string, headers?: Record<string, string>): Promise<Response>;
  waitFor(predicate: () => Promise<boolean> | boolean, timeoutMs?: number): Promise<void>;
  /** Waits until every worker instance is ready (/health/ready needs one per model). */
  allWorkersReady(): Promise<void>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export const DEFAULT_MODELS: ModelConfig[] = [{ name: 'tissue-seg' }, { name: 'gene-expr' }, { name: 'tile-embed' }];

export async function waitFor(predicate: () => Promise<boolean> | boolean, timeoutMs = 30000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`condition not met within ${timeoutMs} ms`);
}

/** The environment without tap's loaders (NODE_OPTIONS) and bookkeeping, which would otherwise
 *  be inherited by the service and every worker it forks. */
function serviceEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_OPTIONS' && !k.startsWith('TAP') && !k.startsWith('_TAPJS')));
}

export async function startServer(options: ServerOptions = {}): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'tile-service-'));
  const logFile = join(dir, 'service.log');
  const config = {
    host: '127.0.0.1',
    port: 0,
    model_repository: MODELS,
    data_dir: join(dir, 'data'),
    models: options.models ?? DEFAULT_MODELS,
    ...options.config,
    // No drain delay on SIGTERM unless a test asks for one: every teardown would wait it out.
    supervisor: { drain_delay_ms: 0, ...(options.config?.supervisor as Record<string, unknown>) },
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  // Through sh, so that tap's spawn hooks cannot put their loaders back into NODE_OPTIONS.
  const proc = spawn('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, join(ROOT, 'dist/supervisor/main.js')], {
    cwd: ROOT,
    env: { ...serviceEnv(), CONFIG: join(dir, 'config.json'), LOG_FILE: logFile, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
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
    proc.once('exit', (code, signal) => reject(new Error(`server exited with ${code ?? signal} before listening: ${stderr}`)));
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const server: TestServer = {
    url,
    proc,
    dir,
    logFile,
    lines,
    post: (path, body, headers = {}) =>
      fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) }),
    get: (path, headers = {}) => fetch(url + path, { headers }),
    waitFor,
    async allWorkersReady() {
      await waitFor(async () => {
        const { workers } = (await (await fetch(url + '/diagnostics')).json()) as { workers: { state: string }[] };
        return workers.every((w) => w.state === 'ready');
      });
    },
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
  if (options.waitReady ?? true) await waitFor(async () => (await server.get('/health/ready')).status === 200);
  return server;
}
