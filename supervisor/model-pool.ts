// All instances of one model: routing to the least-loaded ready instance, the bounded queue,
// one retry when an instance dies mid-request, and rolling reloads.
import { availableParallelism } from 'node:os';
import type { Logger } from 'pino';
import type { InferResult, TileJob, WorkerInfo } from '../src/ipc/protocol.js';
import type { ModelEntry, ServiceConfig } from './config.js';
import { ModelLoadingError, QueueFullError, WorkerGoneError } from './errors.js';
import { WorkerProcess } from './worker-process.js';

export type ModelState = 'ready' | 'loading' | 'restarting' | 'stopped';

export interface PoolOptions {
  entry: ModelEntry;
  gpus: (string | null)[];
  intraOpThreads: number;
  config: ServiceConfig;
  logger: Logger;
  /** Called with each new WorkerProcess, so observers (metrics) can subscribe. */
  onWorker: (worker: WorkerProcess) => void;
}

export class ModelPool {
  workers: WorkerProcess[];
  private queued = 0;

  constructor(private readonly options: PoolOptions) {
    this.workers = options.gpus.map((gpu, instance) => this.createWorker(instance, gpu, true));
  }

  get name(): string {
    return this.options.entry.name;
  }

  /** What the loaded package says of itself, from a ready instance. */
  get info(): WorkerInfo | null {
    return this.workers.find((w) => w.state === 'ready')?.info ?? null;
  }

  get state(): ModelState {
    const states = this.workers.map((w) => w.state);
    if (states.includes('ready')) return 'ready';
    if (states.includes('loading')) return 'loading';
    if (states.includes('restarting')) return 'restarting';
    return 'stopped';
  }

  /** Requests accepted and not yet answered, across instances. */
  get outstanding(): number {
    return this.queued;
  }

  start(): void {
    for (const worker of this.workers) worker.start();
  }

  async infer(job: TileJob): Promise<InferResult> {
    const { max_queue, request_timeout_ms } = this.options.entry;
    if (this.queued >= max_queue) throw new QueueFullError(this.name, max_queue, this.options.config.pressure.retry_after_s);
    this.queued++;
    try {
      const first = this.pick();
      try {
        return await first.infer(job, request_timeout_ms);
      } catch (err) {
        if (!(err instanceof WorkerGoneError)) throw err;
        // Its worker died mid-request: once more on another ready instance, if there is one.
        const second = this.pick(first);
        return await second.infer(job, request_timeout_ms).catch((again) => {
          throw again instanceof WorkerGoneError ? this.loading() : again;
        });
      }
    } finally {
      this.queued--;
    }
  }

  /** Replaces instances one at a time: each replacement must be ready before the old one drains. */
  async reload(): Promise<void> {
    for (let i = 0; i < this.workers.length; i++) {
      const old = this.workers[i];
      const next = this.createWorker(i, old.gpu, false);
      next.start();
      const loaded = await new Promise<boolean>((resolve) => {
        next.once('ready', () => resolve(true));
        next.once('exit', () => resolve(false));
      });
      if (!loaded) {
        this.options.logger.error({ model: this.name, instance: i, error: next.lastError }, 'reload: replacement failed to load; keeping the running worker');
        old.lastError = `reload failed: ${next.lastError}`;
        continue;
      }
      next.autoRestart = true;
      this.workers[i] = next;
      await old.stop(this.options.config.supervisor.shutdown_grace_ms);
    }
  }

  async stop(graceMs: number): Promise<void> {
    await Promise.all(this.workers.map((w) => w.stop(graceMs)));
  }

  private pick(exclude?: WorkerProcess): WorkerProcess {
    let best: WorkerProcess | null = null;
    for (const w of this.workers) {
      if (w === exclude || w.state !== 'ready') continue;
      if (!best || w.outstanding < best.outstanding) best = w;
    }
    if (!best) throw this.loading();
    return best;
  }

  private loading(): ModelLoadingError {
    return new ModelLoadingError(this.name, this.options.config.pressure.retry_after_s);
  }

  private createWorker(instance: number, gpu: string | null, autoRestart: boolean): WorkerProcess {
    const { entry, config } = this.options;
    const worker = new WorkerProcess({
      model: entry.name,
      dir: entry.path!,
      instance,
      gpu,
      intraOpThreads: entry.intra_op_threads ?? this.options.intraOpThreads,
      decodeThreads: entry.decode_threads ?? availableParallelism(),
      maxBatch: entry.max_batch ?? 0,
      maxDelayMs: entry.max_queue_delay_ms,
      config: config.supervisor,
      logger: this.options.logger,
      autoRestart,
    });
    this.options.onWorker(worker);
    return worker;
  }
}
