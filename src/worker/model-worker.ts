// One model's serving loop in the worker process: tiles in, decoded, batched, run through the
// model session, answers out.
import ort from 'onnxruntime-node';
import type { TileJob, WorkerMessage } from '../ipc/protocol.js';
import type { ModelPackage } from '../model-package/model-package.js';
import type { ModelSession } from './model-session.js';
import { decodeTile } from './tile-decoder.js';
import { makePreprocessor, type Preprocessor } from './preprocess.js';
import type { Pixels } from '../tile/png.js';
import { writeBulk } from './bulk.js';
import { Batcher } from './batcher.js';

interface Pending {
  id: number;
  job: TileJob;
  pixels: Pixels;
  times: { receivedAt: number; decode: number; enqueuedAt: number };
}


export interface ModelWorkerOptions {
  /** Largest batch; 0 means the manifest's batch.max (never more than it). */
  maxBatch: number;
  maxDelayMs: number;
  /** Where answers go (the supervisor's channel). */
  send: (message: WorkerMessage) => void;
}

/** Decodes tiles, batches them and runs them through the model session. */
export class ModelWorker {
  readonly stats = { batches: 0, tiles: 0, failures: 0, lastError: null as string | null };
  private readonly batcher: Batcher<Pending>;
  private readonly preprocess: Preprocessor;
  private readonly send: (message: WorkerMessage) => void;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly session: ModelSession,
    options: ModelWorkerOptions,
  ) {
    this.send = options.send;
    this.preprocess = makePreprocessor(pkg.manifest);
    const maxBatch = Math.min(options.maxBatch || Infinity, pkg.manifest.batch.max);
    this.batcher = new Batcher({ maxBatch, maxDelayMs: options.maxDelayMs, run: (batch) => this.run(batch) });
  }

  accept(id: number, job: TileJob): void {
    const receivedAt = performance.now();
    const decoded = decodeTile(job);
    if ('errors' in decoded) {
      this.send({ type: 'invalid', id, errors: decoded.errors });
      return;
    }
    this.batcher.push({ id, job, pixels: decoded.pixels, times: { receivedAt, decode: decoded.decodeMs, enqueuedAt: performance.now() } });
  }

  /** Runs a zero tile through the model before reporting ready. */
  async warmup(iterations: number): Promise<void> {
    const { width, height } = this.pkg.manifest.tile;
    const job: TileJob = { task: this.pkg.manifest.tasks[0], withEmbedding: false, png: new Uint8Array(0), width, height, bulk: null };
    for (let i = 0; i < iterations; i++) {
      // A fresh tile each time: its buffer is handed to the session thread.
      const pixels: Pixels = { width, height, channels: 3, data: new Uint8Array(width * height * 3) };
      await this.infer([{ id: -1, job, pixels, times: { receivedAt: 0, decode: 0, enqueuedAt: 0 } }]);
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
      results.forEach((r) => this.send(r));
    } catch (err) {
      this.stats.failures++;
      this.stats.lastError = (err as Error).message;
      console.error(`session.run failed for a batch of ${batch.length}: ${(err as Error).stack}`);
      for (const item of batch) this.send({ type: 'failed', id: item.id, reason: (err as Error).message });
    }
  }

  private async infer(batch: Pending[]): Promise<WorkerMessage[]> {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = batch.length;
    const t0 = performance.now();
    const feeds: Record<string, ort.Tensor> = { [tensors.image]: this.preprocess.tensor(batch.map((item) => item.pixels)) };
    if (tensors.bulk && manifest.genes) {
      const genes = manifest.genes.input.length;
      const bulk = new Float32Array(n * genes);
      batch.forEach((item, i) => writeBulk(item.job.bulk, manifest.genes!.bulk_transform, bulk, i * genes));
      feeds[tensors.bulk] = new ort.Tensor('float32', bulk, [n, genes]);
    }
    const t1 = performance.now();
    const outputs = await this.session.run(feeds);
    const t2 = performance.now();
    const rows = (name: string | undefined, i: number) => {
      if (!name) return null;
      const data = outputs[name].data as Float32Array | Uint8Array;
      const size = data.length / n;
      return data.slice(i * size, (i + 1) * size);
    };
    return batch.map((item, i): WorkerMessage => {
      const embedding = rows(tensors.embedding, i) as Float32Array | null;
      let output: Float32Array | Uint8Array;
      let tissueFraction: number | null = null;
      if (item.job.task === 'segmentation') {
        const mask = readMask(rows(tensors.mask, i)!, manifest.mask_threshold);
        if (mask.mask.length !== item.job.width * item.job.height) throw new Error(`mask has ${mask.mask.length} pixels, tile has ${item.job.width * item.job.height}`);
        ({ mask: output, tissueFraction } = mask);
      } else {
        output = item.job.task === 'embedding' ? embedding! : (rows(tensors.prediction, i) as Float32Array);
      }
      const times = {
        decode: item.times.decode,
        preprocess: (t1 - t0) / n,
        queue: t0 - item.times.enqueuedAt,
        inference: t2 - t1,
        worker: performance.now() - item.times.receivedAt,
      };
      const withEmbedding = item.job.task === 'prediction' && item.job.withEmbedding;
      return { type: 'result', id: item.id, output, embedding: withEmbedding ? embedding : null, tissueFraction, batchSize: n, times };
    });
  }
}

/** The mask as 0/1 bytes (uint8/bool outputs as they are, floats thresholded) and its tissue
 *  fraction, in one pass. */
function readMask(values: Float32Array | Uint8Array, threshold = 0.5): { mask: Uint8Array; tissueFraction: number } {
  const mask = values instanceof Uint8Array ? values : new Uint8Array(values.length);
  let tissue = 0;
  for (let i = 0; i < values.length; i++) {
    const on = values instanceof Uint8Array ? values[i] !== 0 : values[i] > threshold;
    mask[i] = on ? 1 : 0;
    tissue += mask[i];
  }
  return { mask, tissueFraction: values.length ? tissue / values.length : 0 };
}
