// Model packages that do almost nothing (Cast + ReduceMean over the uint8 tile): served, they
// measure the service's own cost per tile, HTTP to response, and nothing of a model's.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DType, Graph, int, ints } from '../tools/model-build/onnx-graph.js';
import { writePackage } from '../tools/model-build/build.js';

export function writeNullPackage(root: string, size: number): string {
  const g = new Graph('null');
  const x = g.input('image', DType.UINT8, ['batch', size, size, 3]);
  g.op('ReduceMean', [g.op('Cast', [x], { to: int(DType.FLOAT) })], { axes: ints([1, 2]), keepdims: int(0) }, 'mean');
  g.output('mean', DType.FLOAT, ['batch', 3]);
  return writePackage(root, {
    manifest: {
      name: `null-${size}`,
      version: '1',
      description: `Mean colour of a ${size}x${size} tile: a model of no cost, for measuring the service itself`,
      license: 'Apache-2.0',
      tasks: ['prediction'],
      tile: { width: size, height: size, mpp: 0.5, mpp_tolerance: 0.1 },
      preprocess: { input: 'uint8', channel_order: 'RGB' },
      tensors: { image: 'image', prediction: 'mean' },
      batch: { max: 16 },
      provenance: { trained: false, method: 'no weights: Cast and ReduceMean' },
    },
    model: g.serialize({ docString: 'null model for the benchmark', metadata: {} }),
  });
}

/** null-224 and null-512 in a fresh folder; returns the folder. */
export function writeNullPackages(): string {
  const root = mkdtempSync(join(tmpdir(), 'null-models-'));
  for (const size of [224, 512]) writeNullPackage(root, size);
  return root;
}
