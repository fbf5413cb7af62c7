// A model package unlike the shipped ones, as a user's own export would be: other tensor names,
// a 256x256 tile at 1.0 MPP, a dynamic batch axis named like torch.onnx.export's, BGR input, and
// weights in an ONNX external-data file.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Graph, Rng, DType, int, ints } from '../../tools/model-build/onnx-graph.js';
import { linear } from '../../tools/model-build/layers.js';
import type { Manifest } from '../../src/model-package/manifest.js';

export function writeForeignPackage(dir: string, name = 'foreign-vit'): Manifest {
  const rng = new Rng(99);
  const g = new Graph('torch_jit');
  const x = g.input('input.1', DType.FLOAT, ['batch_size', 3, 256, 256]);
  const w = g.constant('onnx::Conv_1', rng.he(64 * 3 * 16 * 16, 3 * 16 * 16), [64, 3, 16, 16]);
  const patches = g.op('Relu', [g.op('Conv', [x, w], { kernel_shape: ints([16, 16]), strides: ints([16, 16]) })]);
  const pooled = g.op('ReduceMean', [patches], { axes: ints([2, 3]), keepdims: int(0) });
  g.op('Tanh', [linear(g, rng, pooled, 64, 48)], {}, 'pooler_output');
  g.output('pooler_output', DType.FLOAT, ['batch_size', 48]);
  const model = g.serialize(
    { docString: 'foreign test export', metadata: {} },
    { location: 'model.onnx.data', minBytes: 1024 },
  );
  const manifest: Manifest = {
    name,
    version: '0.1.0',
    description: 'A foreign export used by the tests',
    license: 'CC0-1.0',
    tasks: ['embedding'],
    tile: { width: 256, height: 256, mpp: 1.0, mpp_tolerance: 0.05 },
    preprocess: {
      scale: 1 / 255,
      mean: { R: 0.485, G: 0.456, B: 0.406 },
      std: { R: 0.229, G: 0.224, B: 0.225 },
      channel_order: 'BGR',
    },
    tensors: { image: 'input.1', embedding: 'pooler_output' },
    embedding_dim: 48,
    batch: { max: 4 },
    provenance: { trained: false, method: 'seeded random weights, test fixture' },
  };
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'model.onnx'), model.model);
  writeFileSync(join(dir, 'model.onnx.data'), model.externalData!.bytes);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  return manifest;
}
