// The HTTP fronts: node:cluster workers sharing the service port. The supervisor (the cluster
// primary) forks them, restarts one that dies (the others keep serving), tells every front the
// models' states, and answers their queries. Fronts reach model workers directly over Unix sockets.
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import type { FromFront, ToFront } from '../src/ipc/protocol.js';
import { frontEnv } from '../src/ipc/fork-config.js';
import { RestartPolicy } from './restart-policy.js';
import { timerMs, type ServiceConfig } from '../src/config/config.js';
import { TILE_PROCESS_EXEC_ARGV } from './v8-flags.js';

const FRONT_ENTRY = new URL('../src/front/main.js', import.meta.url).pathname;

export interface FrontsOptions {
  count: number;
  config: ServiceConfig;
  logger: Logger;
  onMessage: (front: Worker, message: FromFront) => void;
}

export class Fronts {
  private readonly fronts = new Set<Worker>();
  private stopping = false;
  private readonly policy: RestartPolicy;
  private readonly log: Logger;

  constructor(private readonly options: FrontsOptions) {
    this.log = options.logger.child({ role: 'fronts' });
    const s = options.config.supervisor;
    this.policy = new RestartPolicy({
      initialDelayMs: s.restart_initial_delay_ms,
      maxDelayMs: s.restart_max_delay_ms,
      resetAfterMs: s.restart_reset_after_ms,
    });
    // The kernel hands connections to the fronts (they accept from the one shared socket), not the
    // primary: with node's round-robin, a connection the primary has passed to a front that dies
    // before taking it is held open and never answered (round_robin_handle.js waits for a reply
    // that cannot come). Measured with 8 clients while a front is killed every 150 ms: 77 of 2,400
    // requests hung round-robin, none so; keep-alive load split 1,465/1,735 against 1,513/1,687.
    cluster.schedulingPolicy = cluster.SCHED_NONE;
    cluster.setupPrimary({ exec: FRONT_ENTRY, args: [], execArgv: TILE_PROCESS_EXEC_ARGV, serialization: 'advanced' });
  }

  get count(): number {
    return this.options.count;
  }

  start(): void {
    for (let i = 0; i < this.options.count; i++) this.fork(i);
  }

  send(message: ToFront): void {
    for (const front of this.fronts) if (front.isConnected()) front.send(message);
  }

  /** Each front stops accepting, finishes its requests in flight and exits. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    await Promise.all(
      [...this.fronts].map(
        (front) =>
          new Promise<void>((resolve) => {
            if (front.isDead()) return resolve();
            const killer = setTimeout(() => front.process.kill('SIGKILL'), timerMs(graceMs + 1000));
            front.once('exit', () => {
              clearTimeout(killer);
              resolve();
            });
            if (front.isConnected()) front.send({ type: 'stop' } satisfies ToFront);
          }),
      ),
    );
  }

  private fork(index: number): void {
    const front = cluster.fork(frontEnv({ service: this.options.config, index, fronts: this.options.count }));
    const startedAt = Date.now();
    this.fronts.add(front);
    front.on('message', (message: FromFront) => this.options.onMessage(front, message));
    // A send racing the front's death fails here; its exit is handled below.
    front.on('error', (err) => this.log.warn({ front: index, err: err.message }, 'HTTP front channel error'));
    front.on('exit', (code, signal) => {
      this.fronts.delete(front);
      if (this.stopping) return;
      const delay = this.policy.nextDelay(Date.now() - startedAt);
      this.log.error(
        { front: index, frontPid: front.process.pid, code, signal, restartInMs: delay },
        'HTTP front exited; restarting it',
      );
      setTimeout(() => !this.stopping && this.fork(index), delay);
    });
  }
}
