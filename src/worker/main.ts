// Worker process entry: owns one model session. Forked by the supervisor with its WorkerConfig in
// TILE_WORKER and CUDA_VISIBLE_DEVICES set; talks only through the messages in ipc/protocol.ts.
import ort from 'onnxruntime-node';
import type { SupervisorMessage, WorkerConfig, WorkerMessage } from '../ipc/protocol.js';
import { readPackage, type ModelPackage } from '../model-package/model-package.js';
import { ModelSession } from './model-session.js';
import { ModelWorker } from './model-worker.js';

const config = JSON.parse(process.env.TILE_WORKER ?? 'null') as WorkerConfig;
const send = (message: WorkerMessage, done?: () => void) => process.send!(message, undefined, undefined, done);

async function main(): Promise<void> {
  const started = performance.now();
  let worker: ModelWorker | null = null;
  let pkg: ModelPackage;
  let session: ModelSession;
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
        data: { pid: process.pid, uptime_s: process.uptime(), memory: process.memoryUsage(), queued: worker?.queued ?? 0, ...worker?.stats },
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
    session = await ModelSession.open(pkg, config);
    if (session.providerWarning) send({ type: 'log', level: 'warn', msg: session.providerWarning });
    for (const msg of session.plan.warnings) send({ type: 'log', level: 'warn', msg });
    const candidate = new ModelWorker(pkg, session, { maxBatch: config.maxBatch, maxDelayMs: config.maxDelayMs, send });
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
      provider: session.provider,
      providerWarning: session.providerWarning,
      cudaVisibleDevices: process.env.CUDA_VISIBLE_DEVICES ?? null,
      onnxruntime: ort.env.versions.node ?? 'unknown',
      intraOpThreads: config.intraOpThreads,
      loadMs: performance.now() - started,
    },
  });
}

void main();
