// Worker process entry: owns one model session. Forked by the supervisor with its WorkerConfig in
// TILE_WORKER and CUDA_VISIBLE_DEVICES set. Life cycle over process IPC with the supervisor;
// tiles over a Unix socket that every HTTP front connects to (ipc/protocol.ts).
import { createServer } from 'node:net';
import { rmSync } from 'node:fs';
import ort from 'onnxruntime-node';
import type { ChannelReply, ChannelRequest, InferResult, TileJob, WorkerConfig, WorkerControl, WorkerReport } from '../ipc/protocol.js';
import { Channel } from '../ipc/channel.js';
import { errors, ServiceError } from '../lib/errors.js';
import { ExitCode } from '../lib/exit-codes.js';
import { PackageError, readPackage, type ModelPackage } from '../model-package/model-package.js';
import { ModelSession } from './model-session.js';
import { decodeTile } from './tile-decoder.js';
import { makePreprocessor, type Preprocessor } from './preprocess.js';
import type { Pixels } from '../tile/png.js';
import { writeBulk } from './bulk.js';
import { Batcher } from './batcher.js';

/** Answers the front that sent the tile. */
type Reply = (message: ChannelReply) => void;

interface Pending {
  id: number;
  reply: Reply;
  job: TileJob;
  pixels: Pixels;
  times: { receivedAt: number; decode: number; enqueuedAt: number };
}

const config = JSON.parse(process.env.TILE_WORKER ?? 'null') as WorkerConfig;
const send = (message: WorkerReport, done?: () => void) => process.send!(message, undefined, undefined, done);
const stats = { batches: 0, tiles: 0, failures: 0, lastError: null as string | null };

class ModelWorker {
  private readonly batcher: Batcher<Pending>;
  private readonly preprocess: Preprocessor;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly session: ModelSession,
  ) {
    this.preprocess = makePreprocessor(pkg.manifest);
    const maxBatch = Math.min(config.maxBatch || Infinity, pkg.manifest.batch.max);
    this.batcher = new Batcher({ maxBatch, maxDelayMs: config.maxDelayMs, run: (batch) => this.run(batch) });
  }

  async accept(id: number, job: TileJob, reply: Reply): Promise<void> {
    const receivedAt = performance.now();
    const decoded = await decodeTile(job);
    if ('errors' in decoded) return reply({ type: 'error', id, error: errors.tileInvalid(decoded.errors).toWire() });
    this.batcher.push({ id, reply, job, pixels: decoded.pixels, times: { receivedAt, decode: decoded.decodeMs, enqueuedAt: performance.now() } });
  }

  /** Runs a zero tile through the model before reporting ready. */
  async warmup(iterations: number): Promise<void> {
    const { width, height } = this.pkg.manifest.tile;
    const job: TileJob = { task: this.pkg.manifest.tasks[0], withEmbedding: false, png: new Uint8Array(0), width, height, bulk: null };
    for (let i = 0; i < iterations; i++) {
      // A fresh tile each time: its buffer is handed to the session thread.
      const pixels: Pixels = { width, height, channels: 3, data: new Uint8Array(width * height * 3) };
      await this.infer([{ id: -1, reply: () => {}, job, pixels, times: { receivedAt: 0, decode: 0, enqueuedAt: 0 } }]);
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
      stats.batches++;
      stats.tiles += batch.length;
      results.forEach((r, i) => batch[i].reply(r));
    } catch (err) {
      stats.failures++;
      stats.lastError = (err as Error).message;
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
    return batch.map((item, i): InferResult => {
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

/** Load errors that retrying with the same files may cure (memory, the GPU); any other load
 *  error is the package's own. */
const TRANSIENT = /out of memory|cuda|cudnn|bad_alloc|ENOMEM|EMFILE/i;

async function main(): Promise<void> {
  const started = performance.now();
  let worker: ModelWorker | null = null;
  let pkg: ModelPackage;
  let session: ModelSession;
  let stopping = false;

  /** One channel per front; each request is answered on the channel it came from. */
  const server = createServer((socket) => {
    const channel = new Channel<ChannelRequest, ChannelReply>(socket);
    const reply: Reply = (message) => {
      if (channel.isOpen) channel.send(message);
    };
    channel.on('message', ({ id, job }) => {
      // Not processed: the front routes it to another instance.
      if (!worker || stopping) return reply({ type: 'error', id, error: errors.workerGone(`${config.model} worker ${process.pid} is stopping`).toWire() });
      void worker.accept(id, job, reply);
    });
  });

  process.on('message', (message: WorkerControl) => {
    if (message.type === 'probe') {
      return send({
        type: 'probe',
        id: message.id,
        data: { pid: process.pid, uptime_s: process.uptime(), memory: process.memoryUsage(), queued: worker?.queued ?? 0, ...stats },
      });
    }
    if (message.type === 'stop') {
      stopping = true;
      void (worker?.idle() ?? Promise.resolve()).then(() => process.exit(ExitCode.OK));
    }
  });
  // The supervisor is gone: nobody can use our answers.
  process.on('disconnect', () => process.exit(ExitCode.OK));
  process.on('exit', () => rmSync(config.socket, { force: true }));
  // Ctrl-C and a group-wide SIGTERM reach every process; the supervisor drains and stops its
  // workers itself, after the fronts have finished with them.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => {});
  // Heartbeats from the start (the supervisor checks them once the worker is ready; while it
  // loads, a load timeout applies instead, since ONNX Runtime parses the graph synchronously).
  setInterval(() => send({ type: 'heartbeat' }), config.heartbeatMs);

  try {
    pkg = readPackage(config.dir);
    session = await ModelSession.open(pkg, config);
    if (session.providerWarning) send({ type: 'log', level: 'warn', msg: session.providerWarning });
    const candidate = new ModelWorker(pkg, session);
    await candidate.warmup(pkg.manifest.warmup?.iterations ?? 1);
    worker = candidate;
    rmSync(config.socket, { force: true });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(config.socket, resolve));
  } catch (err) {
    const reason = (err as Error).message;
    const packageFault = err instanceof PackageError || !TRANSIENT.test(reason);
    console.error(`model ${config.model} failed to load: ${reason}`);
    send({ type: 'load-failed', reason, packageFault }, () => process.exit(ExitCode.LOAD_FAILED));
    return;
  }
  send({
    type: 'ready',
    info: {
      pid: process.pid,
      model: config.model,
      sha256: pkg.sha256,
      manifest: pkg.manifest,
      provider: session.provider,
      providerWarning: session.providerWarning,
      cudaVisibleDevices: process.env.CUDA_VISIBLE_DEVICES ?? null,
      onnxruntime: ort.env.versions.node ?? 'unknown',
      intraOpThreads: config.intraOpThreads,
      loadMs: performance.now() - started,
      socket: config.socket,
    },
  });
}

void main();
