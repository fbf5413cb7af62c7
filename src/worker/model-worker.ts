// One model's serving loop in the worker process: tiles in, decoded, batched, run through the
// model session, each answer back on the channel its tile came from.
import ort from './ort.js';
import type { ChannelReply, InferResult, TileJob, TileOutput } from '../ipc/protocol.js';
import { errors, ServiceError } from '../lib/errors.js';
import type { ModelPackage } from '../model-package/model-package.js';
import type { ModelSession } from './model-session.js';
import { decodeTile } from './tile-decoder.js';
import { makePreprocessor, type Preprocessor } from './preprocess.js';
import type { Pixels } from '../tile/png.js';
import { writeBulk } from './bulk.js';
import { Batcher } from './batcher.js';
import { float32ToFloat16 } from './float16.js';
import { checkOutputShape, maskOf, maskTensor, numbersOf, rowOf } from './outputs.js';

/** Answers the front that sent the tile. */
export type Reply = (message: ChannelReply) => void;

interface Pending {
  id: number;
  reply: Reply;
  job: TileJob;
  pixels: Pixels;
  times: { receivedAt: number; decode: number; enqueuedAt: number };
}


export interface ModelWorkerOptions {
  /** Largest batch; 0 means the plan's (batch.max, or 1 for a fixed-batch graph), never more. */
  maxBatch: number;
  maxDelayMs: number;
}

/** Decodes tiles, batches them and runs them through the model session. */
export class ModelWorker {
  readonly stats = { batches: 0, tiles: 0, failures: 0, lastError: null as string | null };
  private readonly batcher: Batcher<Pending>;
  private readonly preprocess: Preprocessor;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly session: ModelSession,
    options: ModelWorkerOptions,
  ) {
    this.preprocess = makePreprocessor(pkg.manifest, session.plan.imageInput);
    const maxBatch = Math.min(options.maxBatch || Infinity, session.plan.maxBatch);
    this.batcher = new Batcher({ maxBatch, maxDelayMs: options.maxDelayMs, run: (batch) => this.run(batch) });
  }

  async accept(id: number, job: TileJob, reply: Reply): Promise<void> {
    const receivedAt = performance.now();
    const decoded = await decodeTile(job);
    if ('errors' in decoded) return reply({ type: 'error', id, error: errors.tileInvalid(decoded.errors).toWire() });
    this.batcher.push({ id, reply, job, pixels: decoded.pixels, times: { receivedAt, decode: decoded.decodeMs, enqueuedAt: performance.now() } });
  }

  /** Runs zero tiles through the model before reporting ready; at least once, since the first
   *  run checks the output shapes (a misfit refuses the package at load). `batchSize` tiles per
   *  run (the packaging lint runs a full batch). */
  async warmup(iterations: number, batchSize = 1): Promise<void> {
    const { width, height } = this.pkg.manifest.tile;
    const job: TileJob = { task: this.pkg.manifest.tasks[0], withEmbedding: false, image: { format: 'rgb', bytes: new Uint8Array(0), loc: ['body'] }, width, height, bulk: null };
    for (let i = 0; i < Math.max(1, iterations); i++) {
      // Fresh tiles each time: their buffers are handed to the session thread.
      const batch = Array.from({ length: batchSize }, (): Pending => {
        const pixels: Pixels = { width, height, channels: 3, data: new Uint8Array(width * height * 3) };
        return { id: -1, reply: () => {}, job, pixels, times: { receivedAt: 0, decode: 0, enqueuedAt: 0 } };
      });
      await this.infer(batch);
    }
  }

  idle(): Promise<void> {
    return this.batcher.idle();
  }

  get queued(): number {
    return this.batcher.pending;
  }

  private async run(batch: Pending[]): Promise<void> {
    try {
      const results = await this.infer(batch);
      this.stats.batches++;
      this.stats.tiles += batch.length;
      results.forEach((r, i) => batch[i].reply(r));
    } catch (err) {
      this.stats.failures++;
      this.stats.lastError = (err as Error).message;
      console.error(`session.run failed for a batch of ${batch.length}: ${(err as Error).stack}`);
      const error = ServiceError.from(err).toWire();
      for (const item of batch) item.reply({ type: 'error', id: item.id, error });
    }
  }

  private async infer(batch: Pending[]): Promise<InferResult[]> {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = batch.length;
    const t0 = performance.now();
    const feeds: Record<string, ort.Tensor> = { [tensors.image]: this.preprocess.tensor(batch.map((item) => item.pixels)) };
    if (tensors.bulk && manifest.genes) {
      const genes = manifest.genes.input.length;
      const bulk = new Float32Array(n * genes);
      batch.forEach((item, i) => writeBulk(item.job.bulk, manifest.genes!.bulk_transform, bulk, i * genes));
      const dims = [n, genes];
      feeds[tensors.bulk] = this.session.plan.bulkInput === 'float16' ? new ort.Tensor('float16', float32ToFloat16(bulk), dims) : new ort.Tensor('float32', bulk, dims);
    }
    const t1 = performance.now();
    const outputs = await this.session.run(feeds);
    const t2 = performance.now();
    for (const role of ['mask', 'prediction', 'embedding'] as const) {
      const name = tensors[role];
      if (name) checkOutputShape(manifest, role, outputs[name], n);
    }
    const prediction = tensors.prediction ? numbersOf(outputs[tensors.prediction]) : null;
    const embedding = tensors.embedding ? numbersOf(outputs[tensors.embedding]) : null;
    const masks = tensors.mask ? maskTensor(outputs[tensors.mask]) : null;
    return batch.map((item, i): InferResult => {
      const { task } = item.job;
      let output: TileOutput;
      let tissueFraction: number | null = null;
      if (task === 'segmentation') {
        const { mask, tissueFraction: fraction } = maskOf(manifest, masks!, i);
        output = { role: 'mask', mask };
        tissueFraction = fraction;
      } else {
        output = { role: task, values: rowOf(task === 'embedding' ? embedding! : prediction!, n, i) };
      }
      const times = {
        decode: item.times.decode,
        preprocess: (t1 - t0) / n,
        queue: t0 - item.times.enqueuedAt,
        inference: t2 - t1,
        worker: performance.now() - item.times.receivedAt,
      };
      const withEmbedding = task === 'prediction' && item.job.withEmbedding;
      return { type: 'result', id: item.id, output, embedding: withEmbedding ? rowOf(embedding!, n, i) : null, tissueFraction, batchSize: n, times };
    });
  }
}
