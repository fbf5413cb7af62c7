// The supervisor: the node:cluster primary and the one owner of every process's life cycle. It
// runs one ModelPool per enabled model and the HTTP fronts, tells every front each model's state
// and each instance's socket, and answers the fronts' queries (diagnostics, metrics) and usage.
// It never sees a tile.
import type { Worker } from 'node:cluster';
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { AggregatorRegistry } from 'prom-client';
import type { FromFront, ModelView, ToFront, UsageReport } from '../src/ipc/protocol.js';
import { diagnostics, type DiagnosticsSource } from './diagnostics/payload.js';
import { gpuMemoryRegistry } from './diagnostics/gpu-memory.js';
import { UsageLog } from './usage-log.js';
import { defaultIntraOpThreads, frontCount, type ServiceConfig } from '../src/config/config.js';
import { Fronts } from './fronts.js';
import { ConnectionTally } from './connection-tally.js';
import { assignGpus } from './gpus.js';
import type { GpuInfo } from '../src/gpu/nvidia-smi.js';
import { ModelPool } from './model-pool.js';
import type { WorkerExit } from './worker-life-cycle.js';
import { sdNotify } from './systemd-notify.js';
import { makeSocketDir } from './socket-dir.js';

const RECENT_SLIDES = 1000;
const ROOT = new URL('../../', import.meta.url).pathname;

export class Supervisor implements DiagnosticsSource {
  readonly pools = new Map<string, ModelPool>();
  readonly usage: UsageLog;
  readonly recentSlides = new Set<string>();
  readonly fronts: Fronts;
  private readonly socketDir = makeSocketDir();
  private readonly aggregator = new AggregatorRegistry();
  private readonly gpuMetrics = gpuMemoryRegistry(() => this.workers());
  private readonly diagnose: (categories: string[]) => Promise<unknown>;
  private broadcastPending = false;
  private reloading: Promise<void> | null = null;
  private reloadAgain = false;
  private stopping = false;
  private readonly listening = new Set<Worker>();
  /** The fronts' HTTP connections, summed for each to know its share. */
  private readonly connections = new ConnectionTally<Worker>((total, fronts) =>
    this.fronts.send({ type: 'connections', total, fronts }),
  );
  private announced = false;

  /** `gpus`: the host's GPUs, for models configured with "gpus": "auto" and for pinning. */
  constructor(
    readonly config: ServiceConfig,
    private readonly logger: Logger,
    gpus: GpuInfo[],
  ) {
    const plan = assignGpus(
      config.models,
      gpus.map((g) => g.index),
    );
    for (const entry of config.models) {
      this.pools.set(
        entry.name,
        new ModelPool({
          entry,
          gpus: plan.get(entry.name)!,
          hostGpus: gpus,
          intraOpThreads: defaultIntraOpThreads(entry.instances),
          config,
          logger,
          socketDir: this.socketDir,
          onChange: () => this.broadcastModels(),
          onExit: (exit) => this.onWorkerExit(exit),
        }),
      );
    }
    this.usage = new UsageLog({
      dir: config.data_dir,
      maxFileBytes: config.usage.max_file_bytes,
      recentEntries: config.usage.recent_entries,
      logger,
    });
    this.fronts = new Fronts({
      count: frontCount(config),
      config,
      logger,
      onMessage: (front, message) => this.onFrontMessage(front, message),
    });
    this.diagnose = diagnostics(this, {
      probeTimeoutMs: config.supervisor.probe_timeout_ms,
      logFile: config.log_file,
      folders: {
        models: config.model_repository,
        data: config.data_dir,
        ...(config.log_file && { logs: dirname(config.log_file) }),
      },
      installPaths: [ROOT, process.cwd(), config.model_repository, config.data_dir, this.socketDir],
    });
  }

  start(): void {
    for (const pool of this.pools.values()) pool.start();
    this.fronts.start();
  }

  models(): ModelView[] {
    return [...this.pools.values()].map((p) => p.view());
  }

  workers() {
    return [...this.pools.values()].flatMap((p) => p.workers);
  }

  /** Picks up new model packages: every pool replaces its instances one at a time. Reloads never
   *  overlap (two would each replace the same instance and lose track of a process): a reload
   *  asked for while one runs is one more pass after it, however many were asked for. */
  reload(): Promise<void> {
    if (this.reloading) {
      if (!this.reloadAgain) this.logger.info('reload asked for during a reload: another pass follows it');
      this.reloadAgain = true;
      return this.reloading;
    }
    this.reloading = (async () => {
      this.logger.info('reloading workers one at a time');
      do {
        this.reloadAgain = false;
        for (const pool of this.pools.values()) await pool.reload();
      } while (this.reloadAgain && !this.stopping);
      this.logger.info(this.stopping ? 'reload cut short by the stop' : 'reload done');
    })().finally(() => (this.reloading = null));
    return this.reloading;
  }

  /** Every front reopens LOG_FILE (after logrotate moved it). */
  reopenLogs(): void {
    this.fronts.send({ type: 'reopen-log' });
  }

  /** Fronts report not ready but keep serving, so a balancer takes the host out first. */
  drain(): void {
    this.fronts.send({ type: 'drain' });
  }

  /** Fronts finish their requests first (they need the workers for that), then the workers. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    sdNotify(this.logger, 'STOPPING=1');
    await this.fronts.stop(graceMs);
    await Promise.all([...this.pools.values()].map((p) => p.stop(graceMs)));
    await this.usage.close();
    rmSync(this.socketDir, { recursive: true, force: true });
  }

  /** States change in bursts (a reload, a restart): one message per turn of the event loop. */
  private broadcastModels(): void {
    if (this.broadcastPending) return;
    this.broadcastPending = true;
    setImmediate(() => {
      this.broadcastPending = false;
      this.fronts.send({ type: 'models', models: this.models() });
      this.announceReady();
    });
  }

  /** Tells systemd the service is up once every front listens and every model has settled
   *  (ready, or failed: waiting longer would not help). */
  private announceReady(): void {
    if (this.announced || this.listening.size < this.fronts.count) return;
    const models = this.models();
    if (models.some((m) => m.state === 'loading')) return;
    this.announced = true;
    const failed = models.filter((m) => m.state === 'failed').map((m) => m.name);
    this.logger.info({ failed }, 'service ready');
    sdNotify(
      this.logger,
      'READY=1',
      `STATUS=serving ${models.length - failed.length} of ${models.length} models${failed.length ? `; failed: ${failed.join(', ')}` : ''}`,
    );
  }

  private onWorkerExit(exit: WorkerExit): void {
    if (exit.pid !== null)
      this.fronts.send({ type: 'worker-exit', pid: exit.pid, external: exit.external || exit.device_fault });
  }

  private onFrontMessage(front: Worker, message: FromFront): void {
    const reply = (data: unknown) =>
      front.isConnected() && front.send({ type: 'reply', id: (message as { id: number }).id, data } satisfies ToFront);
    switch (message.type) {
      case 'hello':
        // Before it listens: a front that dies after reporting connections, before it says it
        // listens (its gRPC port taken), leaves the sum too.
        front.once('exit', () => this.connections.remove(front));
        front.send({ type: 'models', models: this.models() } satisfies ToFront);
        return;
      case 'listening':
        this.listening.add(front);
        this.connections.join(front);
        front.once('exit', () => this.listening.delete(front));
        return this.announceReady();
      case 'connections':
        return this.connections.set(front, message.open);
      case 'usage':
        return this.recordUsage(message.entries);
      case 'query':
        if (message.query === 'metrics') {
          void Promise.all([this.aggregator.clusterMetrics(), this.gpuMetrics.metrics()]).then(
            (texts) => reply(texts.join('')),
            (err: Error) => reply(`# metrics unavailable: ${err.message}\n`),
          );
        } else {
          void this.diagnose(message.categories).then(reply, (err: Error) => reply({ error: err.message }));
        }
        return;
    }
  }

  private recordUsage(reports: UsageReport[]): void {
    this.usage.record(reports.map(({ slide, ...entry }) => entry));
    for (const { slide } of reports) {
      if (slide === null) continue;
      this.recentSlides.delete(slide);
      this.recentSlides.add(slide);
      if (this.recentSlides.size > RECENT_SLIDES) this.recentSlides.delete(this.recentSlides.values().next().value!);
    }
  }
}
