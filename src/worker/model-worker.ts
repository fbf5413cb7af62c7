// One model's serving loop in the worker process: tiles in, decoded, batched, run through the
// model session, each answer back on the channel its tile came from.
import ort from '../lib/onnxruntime.js';
import type {
  ChannelReply,
  DropReason,
  InferResult,
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
import { Batcher, type Clock } from './batcher.js';
import { DecodeWindow } from './decode-window.js';
import { float32ToFloat16 } from './float16.js';
import { checkOutputShape, maskOf, maskTensor, numbersOf, rowOf } from './outputs.js';
import { everyBatchSize, padTo, type BatchShapesSetting } from './batch-shapes.js';
import { warmUp } from './warmup.js';
import { isDeviceFault } from '../gpu/device-faults.js';

/** Answers the front that sent the tile. */
export type Reply = (message: ChannelReply) => void;
/** An answer before the worker adds its load, taken once the tile has left it. */
type Answer = ChannelReply extends infer R ? (R extends ChannelReply ? Omit<R, 'load'> : never) : never;

interface Pending {
  id: number;
  link: FrontLink;
  job: TileJob;
  /** When, on the worker's clock (Date.now), after which the answer is no longer wanted. */
  deadline: number;
  pixels: Pixels;
  times: { receivedAt: number; decode: number };
}

/** A batch's inputs, made by `feed` (at its run, or while the batch before it ran). */
interface Feeds {
  feeds: Record<string, ort.Tensor>;
  preprocessMs: number;
  /** The pixels they were made from: a batch of one can be passed as decoded, its tensor the
   *  tile's own buffer. */
  tiles: Pixels[];
}

/** A prepared batch's input buffers that are not a tile's own pixels: the session takes them back
 *  when the batch does not run as prepared. */
function spareBuffers({ feeds, tiles }: Feeds): ArrayBuffer[] {
  const pixels = new Set(tiles.map((p) => p.data.buffer));
  return Object.values(feeds)
    .map((f) => (f.data as ArrayBufferView).buffer as ArrayBuffer)
    .filter((b) => !pixels.has(b));
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
  /** A request's tiles, all or none: past the instance's part of max_queue each is refused (503
   *  TILE_ERR_QUEUE_FULL), unless the instance holds nothing (a request is never too big for
   *  an idle instance: the front bounds it). Running part of a request to refuse the rest would
   *  waste the part and fail it anyway. */
  acceptAll(tiles: readonly { id: number; job: TileJob }[], deadline: number): void;
  cancel(ids: number[]): void;
}

export interface ModelWorkerOptions {
  /** Largest batch; 0 means the plan's (batch.max, or 1 for a fixed-batch graph), never more. */
  maxBatch: number;
  maxDelayMs: number;
  batchShapes: BatchShapesSetting;
  /** A run failed with a device error: the worker must stop serving (it is restarted). */
  onDeviceFault?: (reason: string) => void;
  /** Tiles held at most, from every front (the instance's part of max_queue); more are refused
   *  at once with 503 TILE_ERR_QUEUE_FULL. Unbounded when not given. */
  maxHeld?: number;
  /** Date.now by default (the fronts' deadlines are on it); tests inject theirs. */
  clock?: Clock;
}

/** What the worker uses of its model session: the plan, the provider, the runs and, where it has
 *  them, spare input buffers (tests give their own). */
export type WorkerSession = Pick<ModelSession, 'plan' | 'choice' | 'run'> &
  Partial<Pick<ModelSession, 'buffer' | 'recycle'>>;

/** Decodes tiles, batches them and runs them through the model session. */
export class ModelWorker {
  /** tiles: run; expired and cancelled: dropped without running; refused: past maxHeld; late: run after their deadline
   *  (started: never, by construction; finished: when a batch ran longer than its recent time). */
  readonly stats = {
    batches: 0,
    tiles: 0,
    failures: 0,
    lastError: null as string | null,
    expired: 0,
    cancelled: 0,
    refused: 0,
    startedLate: 0,
    finishedLate: 0,
  };
  /** Tiles being decoded, from every front. */
  private decoding = 0;
  /** Tiles received and not yet decoded, from every front. */
  private readonly undecoded: DecodeWindow<Waiting>;
  /** Each front's answers, and the tiles the worker holds for it (`gone`: the front hung up, and
   *  its tiles still decoding or running count until they end, their answers sent nowhere). */
  private readonly replies = new Map<FrontLink, { reply: Reply; held: Map<number, Held>; gone?: true }>();
  private readonly batcher: Batcher<Pending, Feeds>;
  private readonly preprocess: Preprocessor;
  /** The largest batch the graph and the configuration allow. */
  private readonly maxBatch: number;
  /** Sizes batches are padded up to (set by warm-up; until then, every size). */
  private shapes: number[];
  private readonly padding: Pixels;
  /** Set after a device error: every later batch is refused (retryable) until the restart. */
  private deviceFault: string | null = null;
  private readonly clock: Clock;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly session: WorkerSession,
    private readonly options: ModelWorkerOptions,
  ) {
    this.preprocess = makePreprocessor(pkg.manifest, session.plan.imageInput, session.buffer?.bind(session));
    this.maxBatch = Math.min(options.maxBatch || Infinity, session.plan.maxBatch);
    this.shapes = everyBatchSize(this.maxBatch);
    const { width, height } = pkg.manifest.tile;
    this.padding = { width, height, channels: 3, data: new Uint8Array(width * height * 3) };
    this.clock = options.clock ?? Date.now;
    this.batcher = new Batcher<Pending, Feeds>({
      clock: this.clock,
      maxBatch: this.maxBatch,
      maxDelayMs: options.maxDelayMs,
      run: (batch, feeds) => this.run(batch, feeds),
      prepare: (batch) => this.feed(this.padded(batch)),
      unprepare: (prepared) => {
        for (const b of spareBuffers(prepared)) this.session.recycle?.(b);
      },
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
      held: this.heldTiles(),
      ...(this.options.maxHeld !== undefined && { maxHeld: this.options.maxHeld }),
      batchMs: this.batcher.batchMs,
      maxBatch: this.batcher.maxBatch,
    };
  }

  private heldTiles(): number {
    let held = 0;
    for (const entry of this.replies.values()) held += entry.held.size;
    return held;
  }

  /** A front's channel: `reply` answers on it. */
  link(reply: Reply): FrontLink {
    const held = new Map<number, Held>();
    const link: FrontLink = {
      accept: async (id, job, deadline) => link.acceptAll([{ id, job }], deadline),
      acceptAll: (tiles, deadline) => {
        const { maxHeld = Infinity } = this.options;
        const now = this.heldTiles();
        if (now > 0 && now + tiles.length > maxHeld) {
          const why = `its instance holds ${now} of its ${maxHeld} tiles, its part of max_queue`;
          const error = errors.queueFull(this.pkg.manifest.name, why, 1).toWire();
          this.stats.refused += tiles.length;
          for (const { id } of tiles) this.answer(link, { type: 'error', id, error });
          return;
        }
        for (const { id, job } of tiles) {
          const tile: Waiting = { id, link, job, deadline, receivedAt: performance.now() };
          held.set(id, { state: 'waiting', tile });
          this.undecoded.push(tile);
        }
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
    if (this.clock() + (this.batcher.batchMs ?? 0) > deadline) return this.drop(link, id, 'expired');
    const decoding: Held = { state: 'decoding', cancelled: false };
    held.set(id, decoding);
    this.decoding++;
    const decoded = await decodeTile(job);
    this.decoding--;
    if (decoding.cancelled) {
      this.drop(link, id, 'cancelled');
    } else if ('failure' in decoded) {
      this.answer(link, { type: 'undecodable', id, failure: decoded.failure });
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

  /** The front hung up: nothing it sent is wanted any more. Its tiles being decoded or run cannot
   *  be stopped: they stay held, against maxHeld, until they end. */
  unlink(link: FrontLink): void {
    const entry = this.replies.get(link);
    if (!entry) return;
    entry.gone = true;
    link.cancel([...entry.held.keys()]);
    if (entry.held.size === 0) this.replies.delete(link);
  }

  /** Answers a tile's front, once the worker is done with the tile, with its load without it. */
  private answer(link: FrontLink, message: Answer): void {
    const entry = this.replies.get(link);
    if (!entry) return;
    entry.held.delete(message.id);
    if (!entry.gone) entry.reply({ ...message, load: this.load() } as ChannelReply);
    else if (entry.held.size === 0) this.replies.delete(link);
  }

  private drop(link: FrontLink, id: number, reason: DropReason): void {
    this.stats[reason]++;
    this.answer(link, { type: 'dropped', id, reason });
    this.undecoded.pump();
  }

  /** Runs and checks every candidate batch shape (warmup.ts) before the worker serves, and
   *  serves the shapes it kept. */
  async warmup(iterations: number): Promise<WarmupReport> {
    const report = await warmUp({
      manifest: this.pkg.manifest,
      provider: this.session.choice.provider,
      batchShapes: this.options.batchShapes,
      maxBatch: this.maxBatch,
      iterations,
      forward: async (tiles) =>
        (
          await this.forward(
            tiles,
            tiles.map(() => null),
          )
        ).outputs,
    });
    this.shapes = report.shapes;
    this.batcher.maxBatch = this.shapes[this.shapes.length - 1];
    return report;
  }

  idle(): Promise<void> {
    return this.batcher.idle();
  }

  private async run(batch: Pending[], prepared?: Feeds): Promise<void> {
    // The batch has left the queue: the tiles after it may decode.
    this.undecoded.pump();
    if (this.deviceFault) {
      // Not processed: the front retries on another instance or answers 503 loading.
      const error = errors
        .workerGone(`the device failed (${this.deviceFault}); this worker is restarting`)
        .toWire(true);
      for (const item of batch) this.answer(item.link, { type: 'error', id: item.id, error });
      return;
    }
    const started = this.clock();
    for (const item of batch) if (started > item.deadline) this.stats.startedLate++;
    try {
      const results = await this.infer(batch, prepared);
      this.stats.batches++;
      this.stats.tiles += batch.length;
      const finished = this.clock();
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
      for (const item of batch) this.answer(item.link, { type: 'error', id: item.id, error });
    }
  }

  /** Preprocesses `tiles` (with their bulk counts) into the feeds and runs them: one batch. */
  private async forward(tiles: Pixels[], bulks: (readonly number[] | null)[], prepared = this.feed({ tiles, bulks })) {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = tiles.length;
    const { feeds, preprocessMs } = prepared;
    const t1 = performance.now();
    const outputs = await this.session.run(feeds);
    const t2 = performance.now();
    for (const role of ['mask', 'prediction', 'embedding'] as const) {
      const name = tensors[role];
      if (name) checkOutputShape(manifest, role, outputs[name], n);
    }
    return { outputs, preprocessMs, inferenceMs: t2 - t1 };
  }

  /** A batch's tiles and bulk counts, padded up to a checked shape (the padding's outputs are
   *  dropped). */
  private padded(batch: Pending[]): { tiles: Pixels[]; bulks: (readonly number[] | null)[] } {
    const size = padTo(this.shapes, batch.length);
    const tiles = batch.map((item) => item.pixels);
    const bulks = batch.map((item) => item.job.bulk);
    for (let i = batch.length; i < size; i++) {
      tiles.push(this.padding);
      bulks.push(null);
    }
    return { tiles, bulks };
  }

  /** The feeds of a batch's tiles: the image preprocessed, and the bulk counts when the model takes them. */
  private feed({ tiles, bulks }: { tiles: Pixels[]; bulks: (readonly number[] | null)[] }): Feeds {
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
    return { feeds, preprocessMs: performance.now() - t0, tiles };
  }

  private async infer(batch: Pending[], prepared?: Feeds): Promise<Omit<InferResult, 'load'>[]> {
    const { manifest } = this.pkg;
    const { tensors } = manifest;
    const n = batch.length;
    const started = performance.now();
    const { tiles, bulks } = this.padded(batch);
    const size = tiles.length;
    const { outputs, preprocessMs, inferenceMs } = await this.forward(tiles, bulks, prepared);
    const prediction = tensors.prediction ? numbersOf(outputs[tensors.prediction]) : null;
    const embedding = tensors.embedding ? numbersOf(outputs[tensors.embedding]) : null;
    const masks = tensors.mask ? maskTensor(outputs[tensors.mask]) : null;
    return batch.map((item, i): Omit<InferResult, 'load'> => {
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
        // Waiting undecoded, then decoded in the batcher's queue (where a batch prepared while
        // the one before it ran was preprocessed).
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
        sha256: this.pkg.sha256,
      };
    });
  }
}
