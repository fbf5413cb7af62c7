// One model's serving loop in the worker process: tiles in, decoded, batched, run through the
// model session, each answer back on the channel its tile came from.
import ort from './ort.js';
import type {
  ChannelReply,
  DropReason,
  InferResult,
  ShapeCheck,
  TileJob,
  TileOutput,
  WarmupReport,
  WorkerLoad,
} from '../ipc/protocol.js';
import { errors, ServiceError } from '../lib/errors.js';
import type { ModelPackage } from '../model-package/model-package.js';
import type { ModelSession } from './model-session.js';
import { decodeTile } from './tile-decoder.js';
import { makePreprocessor, type Preprocessor } from './preprocess.js';
import type { Pixels } from '../tile/png.js';
import { writeBulk } from './bulk.js';
import { Batcher } from './batcher.js';
import { DecodeWindow } from './decode-window.js';
import { float32ToFloat16 } from './float16.js';
import { checkOutputShape, maskOf, maskTensor, numbersOf, rowOf } from './outputs.js';
import type { WireTensor } from './session-thread.js';
import { candidateShapes, padTo, servedShapes, type BatchShapesSetting } from './batch-shapes.js';
import { isDeviceFault } from '../gpu/device-faults.js';

/** Answers the front that sent the tile. */
export type Reply = (message: ChannelReply) => void;

interface Pending {
  id: number;
  link: FrontLink;
  job: TileJob;
  /** Date.now() after which the answer is no longer wanted. */
  deadline: number;
  pixels: Pixels;
  times: { receivedAt: number; decode: number };
}

/** A tile received and not yet decoded. */
interface Waiting {
  id: number;
  link: FrontLink;
  job: TileJob;
  deadline: number;
  receivedAt: number;
}

/** A tile the worker holds for a front: waiting to be decoded, being decoded (cancelled: drop it
 *  once decoded), or queued. */
type Held =
  | { state: 'waiting'; tile: Waiting }
  | { state: 'decoding'; cancelled: boolean }
  | { state: 'queued'; item: Pending };

/** One front's channel as the worker sees it: tiles in with their deadlines, cancellations, and
 *  the answers back. */
export interface FrontLink {
  accept(id: number, job: TileJob, deadline: number): Promise<void>;
  cancel(ids: number[]): void;
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
function difference(
  outputs: Record<string, WireTensor>,
  row: number,
  reference: Record<string, WireTensor>,
  names: string[],
): string {
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
  /** tiles: run; expired and cancelled: dropped without running; late: run after their deadline
   *  (started: never, by construction; finished: when a batch ran longer than its recent time). */
  readonly stats = {
    batches: 0,
    tiles: 0,
    failures: 0,
    lastError: null as string | null,
    expired: 0,
    cancelled: 0,
    startedLate: 0,
    finishedLate: 0,
  };
  /** Tiles being decoded, from every front. */
  private decoding = 0;
  /** Tiles received and not yet decoded, from every front. */
  private readonly undecoded: DecodeWindow<Waiting>;
  /** Each front's answers, and the tiles the worker holds for it. */
  private readonly replies = new Map<FrontLink, { reply: Reply; held: Map<number, Held> }>();
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
    this.batcher = new Batcher<Pending>({
      maxBatch: this.maxBatch,
      maxDelayMs: options.maxDelayMs,
      run: (batch) => this.run(batch),
      deadline: (item) => item.deadline,
      expire: (item) => this.drop(item.link, item.id, 'expired'),
    });
    // Two batches decoded or decoding ahead: the next one is ready when the running one ends.
    this.undecoded = new DecodeWindow<Waiting>({
      room: () => 2 * this.batcher.maxBatch - this.decoding - this.batcher.pending,
      start: (tile) => void this.decode(tile),
    });
  }

  /** What every answer tells the fronts of this worker's queue and pace, for their admission. */
  load(): WorkerLoad {
    return {
      queued: this.undecoded.length + this.decoding + this.batcher.pending,
      batchMs: this.batcher.batchMs,
      maxBatch: this.batcher.maxBatch,
    };
  }

  /** A front's channel: `reply` answers on it. */
  link(reply: Reply): FrontLink {
    const held = new Map<number, Held>();
    const link: FrontLink = {
      accept: async (id, job, deadline) => {
        const tile: Waiting = { id, link, job, deadline, receivedAt: performance.now() };
        held.set(id, { state: 'waiting', tile });
        this.undecoded.push(tile);
      },
      cancel: (ids) => {
        for (const id of ids) {
          const tile = held.get(id);
          if (tile?.state === 'waiting' && this.undecoded.remove(tile.tile)) this.drop(link, id, 'cancelled');
          else if (tile?.state === 'decoding') tile.cancelled = true;
          else if (tile?.state === 'queued' && this.batcher.remove(tile.item)) this.drop(link, id, 'cancelled');
        }
      },
    };
    this.replies.set(link, { reply, held });
    return link;
  }

  /** Decodes a tile whose turn has come, unless it could no longer finish in time (then it is
   *  dropped undecoded), and queues it for a batch. */
  private async decode({ id, link, job, deadline, receivedAt }: Waiting): Promise<void> {
    const held = this.replies.get(link)?.held;
    if (!held) return;
    if (Date.now() + (this.batcher.batchMs ?? 0) > deadline) return this.drop(link, id, 'expired');
    const decoding: Held = { state: 'decoding', cancelled: false };
    held.set(id, decoding);
    this.decoding++;
    const decoded = await decodeTile(job);
    this.decoding--;
    if (decoding.cancelled) {
      this.drop(link, id, 'cancelled');
    } else if ('failure' in decoded) {
      this.answer(link, { type: 'undecodable', id, failure: decoded.failure, load: this.load() });
    } else {
      const item: Pending = {
        id,
        link,
        job,
        deadline,
        pixels: decoded.pixels,
        times: { receivedAt, decode: decoded.decodeMs },
      };
      held.set(id, { state: 'queued', item });
      this.batcher.push(item);
    }
    this.undecoded.pump();
  }

  /** The front hung up: nothing it sent is wanted any more. */
  unlink(link: FrontLink): void {
    const ids = [...(this.replies.get(link)?.held.keys() ?? [])];
    link.cancel(ids);
    this.replies.delete(link);
  }

  /** Answers a tile's front, once the worker is done with the tile. */
  private answer(link: FrontLink, message: ChannelReply): void {
    const entry = this.replies.get(link);
    entry?.held.delete(message.id);
    entry?.reply(message);
  }

  private drop(link: FrontLink, id: number, reason: DropReason): void {
    this.stats[reason]++;
    this.answer(link, { type: 'dropped', id, reason, load: this.load() });
    this.undecoded.pump();
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
    const names = (['mask', 'prediction', 'embedding'] as const)
      .map((role) => manifest.tensors[role])
      .filter((n): n is string => !!n);
    const candidates = candidateShapes(this.options.batchShapes, provider, this.maxBatch);
    const largest = candidates[candidates.length - 1];
    const run = (seeds: number[]) =>
      this.forward(
        seeds.map((seed) => noiseTile(width, height, seed)),
        seeds.map(() => null),
      );
    const probe = (size: number) => run(Array(size).fill(PROBE_SEED));
    const rows = (outputs: Record<string, WireTensor>, size: number) =>
      Array.from({ length: size }, (_, i) => rowBytes(outputs, names, i));
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
      const mixed = await run(
        Array.from({ length: largest }, (_, i) => (i === 0 || i === largest - 1 ? PROBE_SEED : PROBE_SEED + 1 + i)),
      );
      const got = rows(mixed.outputs, largest);
      neighbours = !sameBytes(got[0], reference.rows[0]) || !sameBytes(got[largest - 1], reference.rows[largest - 1]);
    }
    // ONNX Runtime's cpu kernels give one answer per shape and row; a GPU library may not (atomics).
    if (provider !== 'cpu')
      deterministic = rows((await probe(largest)).outputs, largest).every((row, i) =>
        sameBytes(row, reference.rows[i]),
      );
    const checks: ShapeCheck[] = candidates.map((size) => {
      const { rows: got, outputs, ms } = results.get(size)!;
      const row = mismatch(got);
      return {
        batch: size,
        ms: Math.round(ms),
        identical: row < 0,
        ...(row >= 0 && { difference: `row ${row}: ${difference(outputs, row, reference.outputs, names)}` }),
      };
    });
    this.shapes = servedShapes(this.options.batchShapes, checks, deterministic, neighbours, this.maxBatch);
    this.batcher.maxBatch = this.shapes[this.shapes.length - 1];
    const note = !deterministic
      ? `${provider} gave the batch of ${largest} two different answers: outputs are not reproducible on it`
      : neighbours
        ? 'a tile changed the outputs of the other tiles of its batch (the graph mixes the batch): batches of one only'
        : null;
    return {
      shapes: this.shapes,
      checks,
      deterministic,
      batchIndependent: this.options.batchShapes !== 'any' && deterministic,
      note,
    };
  }

  idle(): Promise<void> {
    return this.batcher.idle();
  }

  private async run(batch: Pending[]): Promise<void> {
    // The batch has left the queue: the tiles after it may decode.
    this.undecoded.pump();
    if (this.deviceFault) {
      // Not processed: the front retries on another instance or answers 503 loading.
      const error = errors
        .workerGone(`the device failed (${this.deviceFault}); this worker is restarting`)
        .toWire(true);
      for (const item of batch) this.answer(item.link, { type: 'error', id: item.id, error, load: this.load() });
      return;
    }
    const started = Date.now();
    for (const item of batch) if (started > item.deadline) this.stats.startedLate++;
    try {
      const results = await this.infer(batch);
      this.stats.batches++;
      this.stats.tiles += batch.length;
      const finished = Date.now();
      for (const item of batch) if (finished > item.deadline) this.stats.finishedLate++;
      results.forEach((r, i) => this.answer(batch[i].link, r));
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
      for (const item of batch) this.answer(item.link, { type: 'error', id: item.id, error, load: this.load() });
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
      feeds[tensors.bulk] =
        this.session.plan.bulkInput === 'float16'
          ? new ort.Tensor('float16', float32ToFloat16(bulk), dims)
          : new ort.Tensor('float32', bulk, dims);
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
        // Waiting undecoded, then decoded in the batcher's queue.
        queue: started - item.times.receivedAt - item.times.decode,
        inference: inferenceMs,
        worker: performance.now() - item.times.receivedAt,
      };
      const withEmbedding = task === 'prediction' && item.job.withEmbedding;
      return {
        type: 'result',
        id: item.id,
        output,
        embedding: withEmbedding ? rowOf(embedding!, size, i) : null,
        tissueFraction,
        batchSize: n,
        times,
        load: this.load(),
      };
    });
  }
}
