// One model's serving loop in the worker process: tiles in, decoded, batched, run through the
// model session, each answer back on the channel its tile came from.
import ort from './ort.js';
import type { BatchResult, ChannelReply, InferResult, ShapeCheck, TileError, TileJob, TileOutput, WarmupReport } from '../ipc/protocol.js';
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
import type { WireTensor } from './session-thread.js';
import { candidateShapes, padTo, servedShapes, type BatchShapesSetting } from './batch-shapes.js';
import { isDeviceFault } from '../gpu/device-faults.js';

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
  batchShapes: BatchShapesSetting;
  /** A run failed with a device error: the worker must stop serving (it is restarted). */
  onDeviceFault?: (reason: string) => void;
}


/** The warm-up's probe tile; the tiles around it in the neighbour check follow it. */
const PROBE_SEED = 7;

const noise = new Map<string, Uint8Array>();

/** A synthetic tile of seeded noise (mulberry32), so that kernels taking another path show; a
 *  fresh copy each time, since a tile's buffer may be handed to the session thread. */
function noiseTile(width: number, height: number, seed: number): Pixels {
  const key = `${width}x${height}:${seed}`;
  let data = noise.get(key);
  if (!data) {
    data = new Uint8Array(width * height * 3);
    let a = seed >>> 0;
    for (let i = 0; i < data.length; i++) {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = Math.imul(a ^ (a >>> 15), a | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      data[i] = (t ^ (t >>> 14)) >>> 24;
    }
    noise.set(key, data);
  }
  return { width, height, channels: 3, data: data.slice() };
}

/** Row i of each output tensor, as bytes. */
const rowBytes = (outputs: Record<string, WireTensor>, names: string[], i: number) =>
  names.map((name) => {
    const view = outputs[name].data as ArrayBufferView;
    const per = view.byteLength / outputs[name].dims[0];
    return new Uint8Array(view.buffer, view.byteOffset + i * per, per);
  });

const sameBytes = (a: Uint8Array[], b: Uint8Array[]) => a.every((x, k) => Buffer.compare(x, b[k]) === 0);

/** How row `row` of `outputs` differs from the reference's first row:
 *  "embedding: 147 of 160 values differ, by up to 1.9e-7". */
function difference(outputs: Record<string, WireTensor>, row: number, reference: Record<string, WireTensor>, names: string[]): string {
  return names
    .map((name) => {
      const expected = rowOf(numbersOf(reference[name]), reference[name].dims[0], 0);
      const got = rowOf(numbersOf(outputs[name]), outputs[name].dims[0], row);
      let count = 0;
      let most = 0;
      got.forEach((v, k) => {
        if (Object.is(v, expected[k])) return;
        count++;
        most = Math.max(most, Math.abs(v - expected[k]));
      });
      return count ? `${name}: ${count} of ${expected.length} values differ, by up to ${most.toPrecision(2)}` : '';
    })
    .filter(Boolean)
    .join('; ');
}

/** Decodes tiles, batches them and runs them through the model session. */
export class ModelWorker {
  readonly stats = { batches: 0, tiles: 0, failures: 0, lastError: null as string | null };
  private readonly batcher: Batcher<Pending>;
  private readonly preprocess: Preprocessor;
  /** The largest batch the graph and the configuration allow. */
  private readonly maxBatch: number;
  /** Sizes batches are padded up to (set by warm-up; until then, every size). */
  private shapes: number[];
  private readonly padding: Pixels;
  /** Set after a device error: every later batch is refused (retryable) until the restart. */
  private deviceFault: string | null = null;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly session: ModelSession,
    private readonly options: ModelWorkerOptions,
  ) {
    this.preprocess = makePreprocessor(pkg.manifest, session.plan.imageInput);
    this.maxBatch = Math.min(options.maxBatch || Infinity, session.plan.maxBatch);
    this.shapes = Array.from({ length: this.maxBatch }, (_, i) => i + 1);
    const { width, height } = pkg.manifest.tile;
    this.padding = { width, height, channels: 3, data: new Uint8Array(width * height * 3) };
    this.batcher = new Batcher({ maxBatch: this.maxBatch, maxDelayMs: options.maxDelayMs, run: (batch) => this.run(batch) });
  }

  async accept(id: number, job: TileJob, reply: Reply): Promise<void> {
    const receivedAt = performance.now();
    const decoded = await decodeTile(job);
    if ('errors' in decoded) return reply({ type: 'error', id, error: errors.tileInvalid(decoded.errors).toWire() });
    this.batcher.push({ id, reply, job, pixels: decoded.pixels, times: { receivedAt, decode: decoded.decodeMs, enqueuedAt: performance.now() } });
  }

  /** A request's tiles (infer-batch): each is accepted as a lone tile is and joins the batcher,
   *  so it runs in the same batch shapes and gives the same bytes; one reply, in the jobs' order. */
  async acceptBatch(id: number, jobs: TileJob[], reply: Reply): Promise<void> {
    const results: BatchResult['results'] = new Array(jobs.length);
    let left = jobs.length;
    if (left === 0) return reply({ type: 'batch-result', id, results });
    const collect = (i: number) => (message: ChannelReply) => {
      results[i] = message as InferResult | TileError;
      if (--left === 0) reply({ type: 'batch-result', id, results });
    };
    await Promise.all(jobs.map((job, i) => this.accept(i, job, collect(i))));
  }

  /**
   * Runs every candidate batch shape before the worker reports ready (`iterations` times each,
   * at least once: the first run checks the output shapes, and a misfit refuses the package), as
   * a batch of one probe tile in every row, and keeps the shapes whose every row is byte for byte
   * the reference (the largest shape's first row). At the largest shape it also runs the probe
   * between other tiles (do tiles of a batch change each other's outputs?) and, on GPU
   * providers, twice (is the provider deterministic?). Compiling providers compile each shape
   * here rather than on a request.
   */
  async warmup(iterations: number): Promise<WarmupReport> {
    const { manifest } = this.pkg;
    const { width, height } = manifest.tile;
    const { provider } = this.session.choice;
    const names = (['mask', 'prediction', 'embedding'] as const).map((role) => manifest.tensors[role]).filter((n): n is string => !!n);
    const candidates = candidateShapes(this.options.batchShapes, provider, this.maxBatch);
    const largest = candidates[candidates.length - 1];
    const run = (seeds: number[]) => this.forward(seeds.map((seed) => noiseTile(width, height, seed)), seeds.map(() => null));
    const probe = (size: number) => run(Array(size).fill(PROBE_SEED));
    const rows = (outputs: Record<string, WireTensor>, size: number) => Array.from({ length: size }, (_, i) => rowBytes(outputs, names, i));
    const results = new Map<number, { rows: Uint8Array[][]; outputs: Record<string, WireTensor>; ms: number }>();
    for (const size of candidates) {
      const started = performance.now();
      let result = await probe(size);
      const ms = performance.now() - started;
      for (let i = 1; i < iterations; i++) result = await probe(size);
      results.set(size, { rows: rows(result.outputs, size), outputs: result.outputs, ms });
    }
    const reference = results.get(largest)!;
    const expected = reference.rows[0];
    const mismatch = (got: Uint8Array[][]) => got.findIndex((row) => !sameBytes(row, expected));
    let neighbours = false;
    let deterministic = true;
    if (largest > 1) {
      // The probe first and last, other tiles between.
      const mixed = await run(Array.from({ length: largest }, (_, i) => (i === 0 || i === largest - 1 ? PROBE_SEED : PROBE_SEED + 1 + i)));
      const got = rows(mixed.outputs, largest);
      neighbours = !sameBytes(got[0], reference.rows[0]) || !sameBytes(got[largest - 1], reference.rows[largest - 1]);
    }
    // ONNX Runtime's cpu kernels give one answer per shape and row; a GPU library may not (atomics).
    if (provider !== 'cpu') deterministic = rows((await probe(largest)).outputs, largest).every((row, i) => sameBytes(row, reference.rows[i]));
    const checks: ShapeCheck[] = candidates.map((size) => {
      const { rows: got, outputs, ms } = results.get(size)!;
      const row = mismatch(got);
      return { batch: size, ms: Math.round(ms), identical: row < 0, ...(row >= 0 && { difference: `row ${row}: ${difference(outputs, row, reference.outputs, names)}` }) };
    });
    this.shapes = servedShapes(this.options.batchShapes, checks, deterministic, neighbours, this.maxBatch);
    this.batcher.maxBatch = this.shapes[this.shapes.length - 1];
    const note = !deterministic
      ? `${provider} gave the batch of ${largest} two different answers: outputs are not reproducible on it`
      : neighbours
        ? 'a tile changed the outputs of the other tiles of its batch (the graph mixes the batch): batches of one only'
        : null;
    return { shapes: this.shapes, checks, deterministic, batchIndependent: this.options.batchShapes !== 'any' && deterministic, note };
  }

  idle(): Promise<void> {
    return this.batcher.idle();
  }

  get queued(): number {
    return this.batcher.pending;
  }

  private async run(batch: Pending[]): Promise<void> {
    if (this.deviceFault) {
      // Not processed: the front retries on another instance or answers 503 loading.
      const error = errors.workerGone(`the device failed (${this.deviceFault}); this worker is restarting`).toWire();
      for (const item of batch) item.reply({ type: 'error', id: item.id, error });
      return;
    }
    try {
      const results = await this.infer(batch);
      this.stats.batches++;
      this.stats.tiles += batch.length;
      results.forEach((r, i) => batch[i].reply(r));
    } catch (err) {
      this.stats.failures++;
      const message = (err as Error).message;
      this.stats.lastError = message;
      console.error(`session.run failed for a batch of ${batch.length}: ${(err as Error).stack}`);
      if (isDeviceFault(message)) {
        this.deviceFault = message.split('\n')[0];
        this.options.onDeviceFault?.(this.deviceFault);
        return this.run(batch);
      }
      const error = ServiceError.from(err).toWire();
      for (const item of batch) item.reply({ type: 'error', id: item.id, error });
    }
  }

  /** Preprocesses `tiles` (with their bulk counts) into the feeds and runs them: one batch. */
  private async forward(tiles: Pixels[], bulks: (readonly number[] | null)[]) {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = tiles.length;
    const t0 = performance.now();
    const feeds: Record<string, ort.Tensor> = { [tensors.image]: this.preprocess.tensor(tiles) };
    if (tensors.bulk && manifest.genes) {
      const genes = manifest.genes.input.length;
      const bulk = new Float32Array(n * genes);
      bulks.forEach((counts, i) => writeBulk(counts, manifest.genes!.bulk_transform, bulk, i * genes));
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
    return { outputs, preprocessMs: t1 - t0, inferenceMs: t2 - t1 };
  }

  private async infer(batch: Pending[]): Promise<InferResult[]> {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = batch.length;
    const started = performance.now();
    // Padded up to a checked shape; the padding's outputs are dropped.
    const size = padTo(this.shapes, n);
    const tiles = batch.map((item) => item.pixels);
    const bulks = batch.map((item) => item.job.bulk);
    for (let i = n; i < size; i++) {
      tiles.push(this.padding);
      bulks.push(null);
    }
    const { outputs, preprocessMs, inferenceMs } = await this.forward(tiles, bulks);
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
        output = { role: task, values: rowOf(task === 'embedding' ? embedding! : prediction!, size, i) };
      }
      const times = {
        decode: item.times.decode,
        preprocess: preprocessMs / n,
        queue: started - item.times.enqueuedAt,
        inference: inferenceMs,
        worker: performance.now() - item.times.receivedAt,
      };
      const withEmbedding = task === 'prediction' && item.job.withEmbedding;
      return { type: 'result', id: item.id, output, embedding: withEmbedding ? rowOf(embedding!, size, i) : null, tissueFraction, batchSize: n, times };
    });
  }
}
