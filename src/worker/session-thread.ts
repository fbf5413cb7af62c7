// The ONNX Runtime session, on its own thread. onnxruntime-node's session.run blocks the thread
// that calls it, so a worker that ran the model on its main thread could not decode the next
// tiles, nor answer IPC, while a batch ran. Here the main thread decodes and batches; this
// thread only runs the model.
import { existsSync, unlinkSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import ort from '../lib/onnxruntime.js';
import type { ProviderName } from '../config/config.js';
import { NoProviderError, openSession, type ProviderChoice, type ProviderTarget } from './providers.js';

/** A tensor as it crosses between threads (ort.Tensor instances do not survive cloning). */
export interface WireTensor {
  type: ort.Tensor.Type;
  data: ort.Tensor.DataType;
  dims: readonly number[];
}

export interface SessionThreadData extends ProviderTarget {
  modelPath: string;
  intraOpThreads: number;
  provider: 'auto' | ProviderName[];
}

export type ThreadRequest = { id: number; feeds: Record<string, WireTensor> };

export type ThreadReply =
  | ({
      type: 'ready';
      inputNames: readonly string[];
      outputNames: readonly string[];
      inputMetadata: readonly ort.InferenceSession.ValueMetadata[];
      outputMetadata: readonly ort.InferenceSession.ValueMetadata[];
      sessionMs: number;
    } & ProviderChoice)
  /** `noProvider`: no provider of the list can run the model (retrying cannot help). */
  | { type: 'load-failed'; reason: string; noProvider: boolean }
  /** `inputs`: the feeds' buffers, handed back for the next batches (model-session.ts). */
  | { type: 'result'; id: number; outputs: Record<string, WireTensor>; inputs: ArrayBuffer[] }
  | { type: 'failed'; id: number; reason: string; inputs: ArrayBuffer[] };

/** TEST HOOK (TILE_TEST_DEVICE_FAULT=<file>): the first session thread to find that file removes
 *  it, and its run then fails, and every later run, with a sticky CUDA error's message, as a real
 *  device fault does. Lets the tests drive a real worker process through a device fault. */
const FAULT_FILE = process.env.TILE_TEST_DEVICE_FAULT;
let faulted = false;
function injectedFault(): void {
  if (!FAULT_FILE) return;
  if (!faulted && existsSync(FAULT_FILE)) {
    try {
      unlinkSync(FAULT_FILE);
      faulted = true;
    } catch {
      // Another worker took it.
    }
  }
  if (faulted)
    throw new Error('CUDA failure 700: an illegal memory access was encountered (injected by TILE_TEST_DEVICE_FAULT)');
}

const port = parentPort!;
const reply = (message: ThreadReply) => port.postMessage(message, 'inputs' in message ? message.inputs : undefined);
const data = workerData as SessionThreadData;

try {
  const started = performance.now();
  const options: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: data.intraOpThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    // Idle intra-op threads sleep instead of spinning, leaving the CPU to the decoding thread
    // (measured on gene-expr: 1.6 cores busy instead of 2.0 for the same throughput).
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  };
  const { session, choice } = await openSession(data.modelPath, options, data.provider, data);
  const { inputNames, outputNames, inputMetadata, outputMetadata } = session;
  reply({
    type: 'ready',
    inputNames,
    outputNames,
    inputMetadata,
    outputMetadata,
    sessionMs: performance.now() - started,
    ...choice,
  });
  port.on('message', async ({ id, feeds }: ThreadRequest) => {
    // The run is over when the reply leaves, and ONNX Runtime holds no input after it.
    const buffers = Object.values(feeds).map((t) => (t.data as ArrayBufferView).buffer as ArrayBuffer);
    try {
      injectedFault();
      const inputs = Object.fromEntries(
        Object.entries(feeds).map(([name, t]) => [name, new ort.Tensor(t.type, t.data as never, t.dims)]),
      );
      const results = await session.run(inputs);
      const outputs: Record<string, WireTensor> = {};
      for (const [name, t] of Object.entries(results)) outputs[name] = { type: t.type, data: t.data, dims: t.dims };
      reply({ type: 'result', id, outputs, inputs: buffers });
    } catch (err) {
      reply({ type: 'failed', id, reason: (err as Error).message, inputs: buffers });
    }
  });
} catch (err) {
  reply({ type: 'load-failed', reason: (err as Error).message, noProvider: err instanceof NoProviderError });
}
