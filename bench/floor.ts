// The floor: the same model package run by onnxruntime-node in this one process on ready
// (pre-decoded, preprocessed) batches, on the execution provider the service uses. Everything the
// service adds is overhead above it.
import { availableParallelism } from 'node:os';
import ort from '../src/lib/onnxruntime.js';
import type { ModelPackage } from '../src/model-package/model-package.js';
import { makePreprocessor } from '../src/worker/preprocess.js';
import { decodePng } from '../src/tile/png.js';

export interface Floor {
  batch: number;
  threads: number;
  tilesPerSec: number;
  msPerBatch: number;
}

/** `provider`: the one the service's workers use (a floor on another would compare nothing). */
export async function measureFloor(
  pkg: ModelPackage,
  pngs: Buffer[],
  batch: number,
  seconds: number,
  provider = 'cpu',
): Promise<Floor> {
  const { manifest } = pkg;
  const threads = availableParallelism();
  const session = await ort.InferenceSession.create(pkg.modelPath, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    executionProviders: [provider],
  });
  const tiles = await Promise.all(Array.from({ length: batch }, (_, i) => decodePng(pngs[i % pngs.length])));
  const feeds: Record<string, ort.Tensor> = { [manifest.tensors.image]: makePreprocessor(manifest).tensor(tiles) };
  if (manifest.tensors.bulk && manifest.genes) {
    feeds[manifest.tensors.bulk] = new ort.Tensor('float32', new Float32Array(batch * manifest.genes.input.length), [
      batch,
      manifest.genes.input.length,
    ]);
  }
  for (let i = 0; i < 2; i++) await session.run(feeds);
  let runs = 0;
  const started = performance.now();
  while (performance.now() - started < seconds * 1000 || runs < 3) {
    await session.run(feeds);
    runs++;
  }
  const elapsed = performance.now() - started;
  await session.release();
  return { batch, threads, tilesPerSec: (runs * batch * 1000) / elapsed, msPerBatch: elapsed / runs };
}
