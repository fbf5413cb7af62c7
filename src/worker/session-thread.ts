// The ONNX Runtime session, on its own thread. onnxruntime-node's session.run blocks the thread
// that calls it, so a worker that ran the model on its main thread could not decode the next
// tiles, nor answer IPC, while a batch ran. Here the main thread decodes and batches; this
// thread only runs the model.
import { parentPort, workerData } from 'node:worker_threads';
import ort from './ort.js';

/** A tensor as it crosses between threads (ort.Tensor instances do not survive cloning). */
export interface WireTensor {
  type: ort.Tensor.Type;
  data: ort.Tensor.DataType;
  dims: readonly number[];
}

export interface SessionThreadData {
  modelPath: string;
  intraOpThreads: number;
  gpu: string | null;
}

export type ThreadRequest = { id: number; feeds: Record<string, WireTensor> };

export type ThreadReply =
  | {
      type: 'ready';
      inputNames: readonly string[];
      outputNames: readonly string[];
      inputMetadata: readonly ort.InferenceSession.ValueMetadata[];
      outputMetadata: readonly ort.InferenceSession.ValueMetadata[];
      provider: 'cuda' | 'cpu';
      providerWarning: string | null;
    }
  | { type: 'load-failed'; reason: string }
  | { type: 'result'; id: number; outputs: Record<string, WireTensor> }
  | { type: 'failed'; id: number; reason: string };

async function open({ modelPath, intraOpThreads, gpu }: SessionThreadData) {
  const options: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: intraOpThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    // Idle intra-op threads sleep instead of spinning, leaving the CPU to the decoding thread
    // (measured on gene-expr: 1.6 cores busy instead of 2.0 for the same throughput).
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  };
  const cpu = () => ort.InferenceSession.create(modelPath, { ...options, executionProviders: ['cpu'] });
  if (gpu === null) return { session: await cpu(), provider: 'cpu' as const, providerWarning: null };
  try {
    return { session: await ort.InferenceSession.create(modelPath, { ...options, executionProviders: ['cuda'] }), provider: 'cuda' as const, providerWarning: null };
  } catch (err) {
    const providerWarning = `GPU ${gpu} assigned but the CUDA execution provider is unavailable (${(err as Error).message.split('\n')[0]}); running on CPU`;
    return { session: await cpu(), provider: 'cpu' as const, providerWarning };
  }
}

const port = parentPort!;
const reply = (message: ThreadReply) => port.postMessage(message);

try {
  const { session, provider, providerWarning } = await open(workerData as SessionThreadData);
  const { inputNames, outputNames, inputMetadata, outputMetadata } = session;
  reply({ type: 'ready', inputNames, outputNames, inputMetadata, outputMetadata, provider, providerWarning });
  port.on('message', async ({ id, feeds }: ThreadRequest) => {
    try {
      const inputs = Object.fromEntries(Object.entries(feeds).map(([name, t]) => [name, new ort.Tensor(t.type, t.data as never, t.dims)]));
      const results = await session.run(inputs);
      const outputs: Record<string, WireTensor> = {};
      for (const [name, t] of Object.entries(results)) outputs[name] = { type: t.type, data: t.data, dims: t.dims };
      reply({ type: 'result', id, outputs });
    } catch (err) {
      reply({ type: 'failed', id, reason: (err as Error).message });
    }
  });
} catch (err) {
  reply({ type: 'load-failed', reason: (err as Error).message });
}
