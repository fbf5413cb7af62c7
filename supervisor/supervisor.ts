// The supervisor owns every worker process: one ModelPool per enabled model, GPU assignment,
// rolling reloads, and a graceful stop. The HTTP front reaches models only through it.
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { InferResult, TileJob } from '../src/ipc/protocol.js';
import { defaultIntraOpThreads, type ServiceConfig } from './config.js';
import { assignGpus, queryGpus } from './gpus.js';
import { ModelPool } from './model-pool.js';
import type { WorkerProcess } from './worker-process.js';

export class Supervisor extends EventEmitter<{ worker: [WorkerProcess] }> {
  readonly pools = new Map<string, ModelPool>();
  /** Set on SIGTERM before the front stops accepting: readiness answers 503 so that load
   *  balancers take this host out while it still serves. */
  draining = false;

  /** `gpus`: the GPU ids found on the host, for models configured with "gpus": "auto". */
  constructor(
    readonly config: ServiceConfig,
    private readonly logger: Logger,
    gpus: string[],
  ) {
    super();
    const plan = assignGpus(config.models, gpus);
    const threads = defaultIntraOpThreads();
    for (const entry of config.models) {
      this.pools.set(
        entry.name,
        new ModelPool({ entry, gpus: plan.get(entry.name)!, intraOpThreads: threads, config, logger, onWorker: (w) => this.emit('worker', w) }),
      );
    }
  }

  start(): void {
    for (const pool of this.pools.values()) pool.start();
  }

  infer(model: string, job: TileJob): Promise<InferResult> {
    return this.pools.get(model)!.infer(job);
  }

  get workers(): WorkerProcess[] {
    return [...this.pools.values()].flatMap((p) => p.workers);
  }

  /** Picks up new model packages: every pool replaces its instances one at a time. */
  async reload(): Promise<void> {
    this.logger.info('reloading workers one at a time');
    for (const pool of this.pools.values()) await pool.reload();
    this.logger.info('reload done');
  }

  async stop(graceMs: number): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.stop(graceMs)));
  }
}

/** GPU ids for "auto" placement; none (CPU) when nvidia-smi is missing or fails. */
export async function discoverGpus(config: ServiceConfig, logger: Logger): Promise<string[]> {
  if (!config.models.some((m) => m.gpus === 'auto')) return [];
  try {
    const gpus = (await queryGpus()) ?? [];
    logger.info({ gpus: gpus.map((g) => `${g.index}: ${g.name}`) }, gpus.length ? 'GPUs found' : 'no GPU found; models run on CPU');
    return gpus.map((g) => g.index);
  } catch (err) {
    logger.warn({ err }, 'GPU discovery failed; models run on CPU');
    return [];
  }
}
