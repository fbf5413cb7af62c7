// A package's graph loaded by ONNX Runtime on the CPU and checked against its manifest, without
// serving it: what `--check-config` proves of each enabled model before a worker forks. A graph
// that ONNX Runtime cannot load (a truncated download, a file that is not ONNX) is the worker's
// TILE_ERR_MODEL_LOAD; a graph that does not fit the manifest, a PackageError.
import { CodedError } from '../lib/errors.js';
import { checkSignature, type ModelPackage, type ServingPlan } from './model-package.js';

export async function checkGraph(pkg: ModelPackage): Promise<ServingPlan> {
  // Loaded here only: the processes that import this module's neighbours never run a model.
  const { default: ort } = await import('../lib/onnxruntime.js');
  let session: Awaited<ReturnType<typeof ort.InferenceSession.create>>;
  try {
    session = await ort.InferenceSession.create(pkg.modelPath, {
      executionProviders: ['cpu'],
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
    });
  } catch (err) {
    throw new CodedError(
      'TILE_ERR_MODEL_LOAD',
      `${pkg.modelPath}: ONNX Runtime cannot load the graph: ${(err as Error).message.split('\n')[0]}`,
    );
  }
  try {
    return checkSignature(pkg, session);
  } finally {
    await session.release();
  }
}
