// The worker's one ONNX Runtime session: provider choice (CUDA when pinned to a GPU, CPU
// otherwise or as fallback), the manifest-vs-graph check, and batched runs by tensor role.
import ort from 'onnxruntime-node';
import { checkSignature, type ModelPackage } from '../model-package/model-package.js';
import type { WorkerConfig } from '../ipc/protocol.js';

export interface OpenedSession {
  session: ort.InferenceSession;
  provider: 'cuda' | 'cpu';
  providerWarning: string | null;
}

export async function openSession(pkg: ModelPackage, config: WorkerConfig): Promise<OpenedSession> {
  const options: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: config.intraOpThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    // Idle intra-op threads sleep instead of spinning: the worker's JS thread decodes the next
    // tiles between runs, and spinning threads took that CPU (measured: 2.0 cores busy for the
    // same throughput as 1.6 with spinning off on gene-expr).
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  };
  let provider: OpenedSession['provider'] = 'cpu';
  let providerWarning: string | null = null;
  let session: ort.InferenceSession | null = null;
  if (config.gpu !== null) {
    try {
      session = await ort.InferenceSession.create(pkg.modelPath, { ...options, executionProviders: ['cuda'] });
      provider = 'cuda';
    } catch (err) {
      providerWarning = `GPU ${config.gpu} assigned but the CUDA execution provider is unavailable (${(err as Error).message.split('\n')[0]}); running on CPU`;
    }
  }
  session ??= await ort.InferenceSession.create(pkg.modelPath, { ...options, executionProviders: ['cpu'] });
  checkSignature(pkg, session);
  return { session, provider, providerWarning };
}
