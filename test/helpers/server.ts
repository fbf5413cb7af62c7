// Starts the real service (`node dist/supervisor/main.js`) as a child process on a free port,
// with its own config, data folder and log file, and talks HTTP to it.
import { join } from 'node:path';
import { ROOT, spawnService, waitFor } from '../../tools/service-process.js';
import type { ChildProcess } from 'node:child_process';

export { ROOT, waitFor };
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
  /** The service's open-file limit (ulimit -n). */
  fdLimit?: number;
  /** Started with `npm start` (proc is the npm process). */
  npmStart?: boolean;
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

export async function startServer(options: ServerOptions = {}): Promise<TestServer> {
  // One HTTP front unless a test is about several: fewer processes, faster tests.
  const config = {
    model_repository: MODELS,
    fronts: 1,
    models: options.models ?? DEFAULT_MODELS,
    ...options.config,
    // No drain delay on SIGTERM unless a test asks for one: every teardown would wait it out.
    supervisor: { drain_delay_ms: 0, ...(options.config?.supervisor as Record<string, unknown>) },
    // No event-loop-delay limit unless a test is about pressure: on a loaded CI host a front
    // parsing a 4 MB body can pass 1 s of delay and answer 503 to a test about something else.
    pressure: { max_event_loop_delay_ms: 0, ...(options.config?.pressure as Record<string, unknown>) },
  };
  const { url, proc, dir, lines, exited } = await spawnService(config, {
    env: options.env,
    fdLimit: options.fdLimit,
    npmStart: options.npmStart,
  });
  const server: TestServer = {
    url,
    proc,
    dir,
    logFile: join(dir, 'service.log'),
    lines,
    post: (path, body, headers = {}) =>
      fetch(url + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      }),
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
