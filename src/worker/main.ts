// Worker process entry: owns one model session. Forked by the supervisor with its WorkerConfig in
// TILE_WORKER and CUDA_VISIBLE_DEVICES set; talks only through the messages in ipc/protocol.ts.
import ort from 'onnxruntime-node';
import type { SupervisorMessage, TileJob, WorkerConfig, WorkerMessage } from '../ipc/protocol.js';
import { readPackage, type ModelPackage } from '../model-package/model-package.js';
import { openSession, type OpenedSession } from './model-session.js';
import { decodeTile, makePreprocessor, type Preprocessor } from './tile-decoder.js';
import { writeBulk } from './bulk.js';
import { Batcher } from './batcher.js';

interface Pending {
  id: number;
  job: TileJob;
  rgba: Buffer;
  times: { receivedAt: number; base64: number; decode: number; enqueuedAt: number };
}

const config = JSON.parse(process.env.TILE_WORKER ?? 'null') as WorkerConfig;
const send = (message: WorkerMessage, done?: () => void) => process.send!(message, undefined, undefined, done);
const stats = { batches: 0, tiles: 0, failures: 0, lastError: null as string | null };

class ModelWorker {
  private readonly batcher: Batcher<Pending>;
  private readonly preprocess: Preprocessor;

  constructor(
    private readonly pkg: ModelPackage,
    private readonly opened: OpenedSession,
  ) {
    this.preprocess = makePreprocessor(pkg.manifest);
    const maxBatch = Math.min(config.maxBatch || Infinity, pkg.manifest.batch.max);
    this.batcher = new Batcher({ maxBatch, maxDelayMs: config.maxDelayMs, run: (batch) => this.run(batch) });
  }

  accept(id: number, job: TileJob): void {
    const receivedAt = performance.now();
    const decoded = decodeTile(job);
    if ('errors' in decoded) {
      send({ type: 'invalid', id, errors: decoded.errors });
      return;
    }
    this.batcher.push({ id, job, rgba: decoded.rgba, times: { receivedAt, base64: decoded.base64Ms, decode: decoded.decodeMs, enqueuedAt: performance.now() } });
  }

  /** Runs a zero tile through the model before reporting ready. */
  async warmup(iterations: number): Promise<void> {
    const { width, height } = this.pkg.manifest.tile;
    const job: TileJob = { task: this.pkg.manifest.tasks[0], withEmbedding: false, imageBase64: '', width, height, bulk: null };
    for (let i = 0; i < iterations; i++) await this.infer([{ id: -1, job, rgba: Buffer.alloc(width * height * 4), times: { receivedAt: 0, base64: 0, decode: 0, enqueuedAt: 0 } }]);
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
      results.forEach((r) => send(r));
    } catch (err) {
      stats.failures++;
      stats.lastError = (err as Error).message;
      console.error(`session.run failed for a batch of ${batch.length}: ${(err as Error).stack}`);
      for (const item of batch) send({ type: 'failed', id: item.id, reason: (err as Error).message });
    }
  }

  private async infer(batch: Pending[]): Promise<WorkerMessage[]> {
    const { manifest } = this.pkg;
    const { tensors, tile } = manifest;
    const n = batch.length;
    const t0 = performance.now();
    const image = new Float32Array(n * this.preprocess.size);
    batch.forEach((item, i) => this.preprocess.write(item.rgba, image, i * this.preprocess.size));
    const feeds: Record<string, ort.Tensor> = { [tensors.image]: new ort.Tensor('float32', image, [n, 3, tile.height, tile.width]) };
    if (tensors.bulk && manifest.genes) {
      const genes = manifest.genes.input.length;
      const bulk = new Float32Array(n * genes);
      batch.forEach((item, i) => writeBulk(item.job.bulk, manifest.genes!.bulk_transform, bulk, i * genes));
      feeds[tensors.bulk] = new ort.Tensor('float32', bulk, [n, genes]);
    }
    const t1 = performance.now();
    const outputs = await this.opened.session.run(feeds);
    const t2 = performance.now();
    const rows = (name: string | undefined, i: number) => {
      if (!name) return null;
      const data = outputs[name].data as Float32Array | Uint8Array;
      const size = data.length / n;
      return data.slice(i * size, (i + 1) * size);
    };
    return batch.map((item, i): WorkerMessage => {
      const times = {
        base64: item.times.base64,
        decode: item.times.decode,
        preprocess: (t1 - t0) / n,
        queue: t0 - item.times.enqueuedAt,
        inference: t2 - t1,
        worker: performance.now() - item.times.receivedAt,
      };
      const embedding = rows(tensors.embedding, i) as Float32Array | null;
      if (item.job.task === 'segmentation') {
        const mask = toMask(rows(tensors.mask, i)!, manifest.mask_threshold);
        if (mask.length !== item.job.width * item.job.height) throw new Error(`mask has ${mask.length} pixels, tile has ${item.job.width * item.job.height}`);
        let tissue = 0;
        for (let p = 0; p < mask.length; p++) tissue += mask[p];
        return { type: 'result', id: item.id, output: mask, embedding: null, tissueFraction: tissue / mask.length, batchSize: n, times };
      }
      const output = item.job.task === 'embedding' ? embedding! : (rows(tensors.prediction, i) as Float32Array);
      const withEmbedding = item.job.task === 'prediction' && item.job.withEmbedding;
      return { type: 'result', id: item.id, output, embedding: withEmbedding ? embedding : null, tissueFraction: null, batchSize: n, times };
    });
  }
}

/** A uint8/bool mask passes through as 0/1; a float mask is thresholded. */
function toMask(values: Float32Array | Uint8Array, threshold = 0.5): Uint8Array {
  if (values instanceof Uint8Array) return values.map((v) => (v ? 1 : 0));
  const mask = new Uint8Array(values.length);
  for (let i = 0; i < values.length; i++) mask[i] = values[i] > threshold ? 1 : 0;
  return mask;
}

async function main(): Promise<void> {
  const started = performance.now();
  let worker: ModelWorker | null = null;
  let pkg: ModelPackage;
  let opened: OpenedSession;
  let stopping = false;

  process.on('message', (message: SupervisorMessage) => {
    if (message.type === 'infer') {
      if (!worker || stopping) return send({ type: 'failed', id: message.id, reason: 'worker is not serving' });
      return worker.accept(message.id, message.job);
    }
    if (message.type === 'probe') {
      return send({
        type: 'probe',
        id: message.id,
        data: { pid: process.pid, uptime_s: process.uptime(), memory: process.memoryUsage(), queued: worker?.queued ?? 0, ...stats },
      });
    }
    if (message.type === 'stop') {
      stopping = true;
      void (worker?.idle() ?? Promise.resolve()).then(() => process.exit(0));
    }
  });
  // The supervisor is gone: nobody can use our answers.
  process.on('disconnect', () => process.exit(0));
  // Ctrl-C reaches the whole process group; the supervisor drains and stops its workers itself.
  process.on('SIGINT', () => {});
  // Heartbeats from the start (the supervisor checks them once the worker is ready; while it
  // loads, a load timeout applies instead, since ONNX Runtime parses the graph synchronously).
  setInterval(() => send({ type: 'heartbeat' }), config.heartbeatMs);

  try {
    pkg = readPackage(config.dir);
    opened = await openSession(pkg, config);
    if (opened.providerWarning) send({ type: 'log', level: 'warn', msg: opened.providerWarning });
    const candidate = new ModelWorker(pkg, opened);
    await candidate.warmup(pkg.manifest.warmup?.iterations ?? 1);
    worker = candidate;
  } catch (err) {
    const reason = (err as Error).message;
    console.error(`model ${config.model} failed to load: ${reason}`);
    send({ type: 'load-failed', reason }, () => process.exit(3));
    return;
  }
  send({
    type: 'ready',
    info: {
      pid: process.pid,
      model: config.model,
      sha256: pkg.sha256,
      manifest: pkg.manifest,
      provider: opened.provider,
      providerWarning: opened.providerWarning,
      cudaVisibleDevices: process.env.CUDA_VISIBLE_DEVICES ?? null,
      onnxruntime: ort.env.versions.node ?? 'unknown',
      intraOpThreads: config.intraOpThreads,
      loadMs: performance.now() - started,
    },
  });
}

void main();
