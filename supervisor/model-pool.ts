// All instances of one model, as the supervisor owns them: starting, the model's state, and
// rolling reloads. Routing requests to instances is the fronts' job (src/front/routing.ts).
import { availableParallelism } from 'node:os';
import type { Logger } from 'pino';
import type { ModelState, ModelView, WorkerInfo } from '../src/ipc/protocol.js';
import type { ModelEntry, ServiceConfig } from '../src/config/config.js';
import type { GpuInfo } from '../src/gpu/nvidia-smi.js';
import { hostGpu } from './gpus.js';
import { WorkerLifeCycle, type Outside, type WorkerExit } from './worker-life-cycle.js';

export interface PoolOptions {
  entry: ModelEntry;
  gpus: (string | null)[];
  /** The host's GPUs as nvidia-smi lists them (their PCI addresses pin webgpu too). */
  hostGpus: GpuInfo[];
  intraOpThreads: number;
  config: ServiceConfig;
  logger: Logger;
  /** Where instance sockets live (the supervisor's runtime folder). */
  socketDir: string;
  /** Any instance changed state. */
  onChange: () => void;
  onExit: (exit: WorkerExit) => void;
  /** Default: real processes and time. */
  outside?: Outside;
}

export class ModelPool {
  /** The serving instance of each slot; a reload swaps them one at a time. */
  readonly #workers: WorkerLifeCycle[];
  private reloads = 0;
  /** The replacement a reload is loading: not serving yet, but a process to stop with the rest. */
  private candidate: WorkerLifeCycle | null = null;
  private stopping = false;

  constructor(private readonly options: PoolOptions) {
    this.#workers = options.gpus.map((gpu, instance) => this.createWorker(instance, gpu, true));
  }

  get workers(): readonly WorkerLifeCycle[] {
    return this.#workers;
  }

  get name(): string {
    return this.options.entry.name;
  }

  /** What the loaded package says of itself, from a ready instance. */
  get info(): WorkerInfo | null {
    return this.workers.find((w) => w.state === 'ready')?.info ?? null;
  }

  /** Ready with one ready instance; failed when every instance failed to load its package. */
  get state(): ModelState {
    const states = this.workers.map((w) => w.state);
    if (states.includes('ready')) return 'ready';
    if (states.every((s) => s === 'failed')) return 'failed';
    if (states.every((s) => s === 'stopped' || s === 'stopping')) return 'stopped';
    return 'loading';
  }

  view(): ModelView {
    const state = this.state;
    return {
      name: this.name,
      state,
      reason: state === 'failed' ? (this.workers[0].lastError ?? 'unknown') : null,
      info: this.info,
      instances: this.workers.map((w) => w.view()),
    };
  }

  start(): void {
    for (const worker of this.workers) worker.start();
  }

  /** Replaces instances one at a time: each replacement must be ready before the old one drains.
   *  A failed instance simply tries again. One reload at a time (the supervisor sees to it). */
  async reload(): Promise<void> {
    this.reloads++;
    for (let i = 0; i < this.workers.length && !this.stopping; i++) {
      const old = this.workers[i];
      if (old.state === 'failed') {
        old.retryNow();
        continue;
      }
      const next = (this.candidate = this.createWorker(i, old.gpu, false));
      next.start();
      const loaded = await new Promise<boolean>((resolve) => {
        next.once('ready', () => resolve(true));
        next.once('exit', () => resolve(false));
      });
      this.candidate = null;
      // stop() has stopped the candidate with the other instances.
      if (this.stopping) return;
      if (!loaded) {
        this.options.logger.error(
          { model: this.name, instance: i, reason: next.lastError },
          'reload: replacement failed to load; keeping the running worker',
        );
        old.replacementFailed(next.lastError);
        continue;
      }
      next.promote(old.restarts);
      this.#workers[i] = next;
      this.options.onChange();
      await old.stop(this.options.config.supervisor.shutdown_grace_ms);
    }
  }

  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.workers, ...(this.candidate ? [this.candidate] : [])].map((w) => w.stop(graceMs)));
  }

  private createWorker(instance: number, gpu: string | null, autoRestart: boolean): WorkerLifeCycle {
    const { entry, config, socketDir } = this.options;
    const reload = this.reloads;
    const worker = new WorkerLifeCycle({
      model: entry.name,
      dir: entry.path!,
      instance,
      gpu,
      gpuInfo: hostGpu(this.options.hostGpus, gpu),
      provider: entry.provider,
      batchShapes: entry.batch_shapes,
      intraOpThreads: entry.intra_op_threads ?? this.options.intraOpThreads,
      decodeThreads: entry.decode_threads ?? availableParallelism(),
      maxBatch: entry.max_batch ?? 0,
      maxDelayMs: entry.max_queue_delay_ms,
      // The fronts admit by the workers' reports, which can be a beat old: the instances hold
      // the bound itself.
      maxHeld: Math.max(1, Math.ceil(entry.max_queue / this.options.gpus.length)),
      socketPath: (generation) => `${socketDir}/${entry.name}-${instance}-${reload}-${generation}.sock`,
      dataDir: config.data_dir,
      config: config.supervisor,
      logger: this.options.logger,
      autoRestart,
      outside: this.options.outside,
    });
    worker.on('change', this.options.onChange);
    worker.on('exit', this.options.onExit);
    return worker;
  }
}
