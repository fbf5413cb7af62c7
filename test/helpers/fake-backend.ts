// A ModelBackend for the in-process tier: the real HTTP app (src/front/app.ts) driven with
// fastify.inject, over models whose states a test sets and whose "inference" is a cheap function
// of the tile's bytes. Processes are the point of the e2e tier, not of this one.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import type { Registry } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import { loadConfig, type ServiceConfig } from '../../src/config/config.js';
import { buildApp } from '../../src/front/app.js';
import {
  type InferOptions,
  type ModelBackend,
  type Evictable,
  type RequestBytes,
  type Ticket,
  type Upload,
  unavailable,
} from '../../src/front/backend.js';
import { QueueShare } from '../../src/front/queue-share.js';
import type { InferResult, ModelState, ModelView, TileJob, UsageReport } from '../../src/ipc/protocol.js';
import { ServiceError } from '../../src/lib/errors.js';
import { readManifest } from '../../src/model-package/model-package.js';
import { MODELS, ROOT } from './server.js';
import { tempDir } from '../../tools/temp-dir.js';

/** The package digest every fake model has (its metadata and its answers). */
export const FAKE_SHA256 = 'f'.repeat(64);

export class FakeBackend implements ModelBackend {
  readonly usage: UsageReport[] = [];
  readonly jobs: TileJob[] = [];
  /** Each tile's InferOptions.spent: the bytes its request gave up once answered (free-bytes.ts). */
  readonly spent: (Uint8Array | undefined)[] = [];
  /** Each tile's InferOptions.signal: aborted when its client left. */
  readonly signals: (AbortSignal | undefined)[] = [];
  draining = false;
  /** Resolves inference; a test may hold it. */
  gate: Promise<void> = Promise.resolve();
  /** How far the budget's clock runs ahead of Date.now(), in ms: a test passes time for the
   *  holders' pace (src/front/pace.ts) without waiting it out. */
  ahead = 0;
  private readonly views = new Map<string, ModelView>();
  private readonly share: QueueShare;

  constructor(config: ServiceConfig) {
    this.share = new QueueShare(
      config,
      1,
      () => [],
      () => Date.now() + this.ahead,
    );
    for (const entry of config.models) {
      const manifest = readManifest(entry.path!);
      this.views.set(entry.name, {
        name: entry.name,
        state: 'ready',
        reason: null,
        info: {
          pid: 1,
          model: entry.name,
          sha256: FAKE_SHA256,
          manifest,
          provider: 'cpu',
          providerSkipped: [],
          adapter: null,
          cudaVisibleDevices: null,
          onnxruntime: 'fake',
          intraOpThreads: 1,
          loadMs: 0,
          sessionMs: 0,
          warmup: {
            shapes: [1],
            checks: [{ batch: 1, ms: 0, identical: true }],
            deterministic: true,
            batchIndependent: true,
            note: null,
          },
          socket: '',
        },
        instances: [
          {
            id: `${entry.name}#0`,
            pid: 1,
            state: 'ready',
            socket: '',
            restarts: 0,
            gpu: null,
            provider: 'cpu',
            providerSkipped: [],
            adapter: null,
            loadMs: 0,
            warmup: null,
            lastError: null,
          },
        ],
      });
    }
  }

  setState(model: string, state: ModelState, reason: string | null = null): void {
    const view = this.views.get(model)!;
    view.state = state;
    view.reason = reason;
    view.instances[0].state = state === 'stopped' ? 'stopped' : state;
  }

  models(): ModelView[] {
    return [...this.views.values()];
  }
  model(name: string): ModelView | undefined {
    return this.views.get(name);
  }
  queued(model: string): number {
    return this.share.queued(model);
  }

  /** The front's own admission (queue-share.ts) with one front and no instance estimate: the
   *  share of max_queue bounds it. */
  admit(model: string, tiles = 1, upload?: Upload): Ticket {
    const error = unavailable(model, this.views.get(model));
    if (error) throw error;
    return this.share.admit(model, tiles, upload);
  }

  requestBytes(control?: boolean, client?: Evictable): RequestBytes {
    return this.share.requestBytes(control, client);
  }

  /** Output from the tile: a mask of the image's bytes' low bits, or their mean per output. */
  async infer(model: string, job: TileJob, options: InferOptions = {}): Promise<InferResult> {
    this.jobs.push(job);
    this.spent.push(options.spent);
    this.signals.push(options.signal);
    const done = options.ticket?.hold();
    await this.gate.finally(done);
    const manifest = this.views.get(model)!.info!.manifest;
    const bytes = job.image.bytes;
    const mean = bytes.reduce((a, b) => a + b, 0) / bytes.length;
    const values = (n: number) => Float32Array.from({ length: n }, (_, i) => mean + i);
    const times = { decode: 0, preprocess: 0, queue: 0, inference: 0, worker: 0 };
    const load = { queued: 0, held: 0, batchMs: null, maxBatch: 1 };
    if (job.task === 'segmentation') {
      const mask = Uint8Array.from({ length: job.width * job.height }, (_, i) => bytes[i % bytes.length] & 1);
      return {
        type: 'result',
        id: 0,
        output: { role: 'mask', mask },
        embedding: null,
        tissueFraction: mask.reduce((a, b) => a + b, 0) / mask.length,
        batchSize: 1,
        times,
        sha256: FAKE_SHA256,
        load,
      };
    }
    const embedding = values(manifest.embedding_dim ?? 4);
    const output = job.task === 'embedding' ? embedding : values(manifest.genes?.output.length ?? 2);
    return {
      type: 'result',
      id: 0,
      output: { role: job.task === 'embedding' ? 'embedding' : 'prediction', values: output },
      embedding: job.withEmbedding ? embedding : null,
      tissueFraction: null,
      batchSize: 1,
      times,
      sha256: FAKE_SHA256,
      load,
    };
  }

  /** Each tile as infer runs it. */
  async inferBatch(model: string, jobs: TileJob[], options?: InferOptions): Promise<(InferResult | ServiceError)[]> {
    return Promise.all(
      jobs.map((job) => this.infer(model, job, options).catch((err: unknown) => ServiceError.from(err))),
    );
  }

  async diagnostics(categories: string[]): Promise<unknown> {
    return { categories };
  }
  metrics(local: Registry): Promise<string> {
    return local.metrics();
  }
  recordUsage(entry: UsageReport): void {
    this.usage.push(entry);
  }
}

/** The real app over a FakeBackend, with the shipped models' manifests and `config` on top. */
export async function fakeService(
  config: Record<string, unknown> = {},
): Promise<{ app: FastifyInstance; backend: FakeBackend; config: ServiceConfig }> {
  const dir = tempDir('http');
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({
      model_repository: MODELS,
      data_dir: join(dir, 'data'),
      models: [{ name: 'tissue-seg' }, { name: 'gene-expr' }, { name: 'tile-embed' }],
      ...config,
    }),
  );
  const service = loadConfig({ CONFIG: file }, ROOT);
  const backend = new FakeBackend(service);
  const app = await buildApp({ config: service, backend, logger: pino({ level: 'silent' }) });
  return { app, backend, config: service };
}
