// tile-embed: a small vision transformer (8x8 patches, so 784 tokens, 4 pre-norm blocks, 4 heads,
// mean-pooled tokens) giving a 160-d embedding: about 3 GFLOPs per tile, CTransPath-sized work,
// with few weights. A different backbone from gene-expr's CNN. Not trained.
import { Graph, Rng, DType, int, ints } from './onnx-graph.js';
import { linear, layerNorm, l2normalize, normalizedImage } from './layers.js';
import type { Manifest } from '../../src/model-package/manifest.js';
import type { PackageBuild } from './package-build.js';

const SEED = 7160;
const DIM = 160;
const HEADS = 4;
const DEPTH = 4;
const PATCH = 8;
const TOKENS = (224 / PATCH) ** 2;
const VIT_STD = 0.02;

function attention(g: Graph, rng: Rng, x: string): string {
  const headDim = DIM / HEADS;
  const split = g.shape('heads', [0, TOKENS, HEADS, headDim]);
  const heads = (perm: number[]) =>
    g.op('Transpose', [g.op('Reshape', [linear(g, rng, x, DIM, DIM, VIT_STD), split])], { perm: ints(perm) });
  const q = heads([0, 2, 1, 3]);
  const k = heads([0, 2, 3, 1]);
  const v = heads([0, 2, 1, 3]);
  const scores = g.op('Mul', [g.op('MatMul', [q, k]), g.scalar('scale', 1 / Math.sqrt(headDim))]);
  const context = g.op('MatMul', [g.op('Softmax', [scores], { axis: int(-1) }), v]);
  const merged = g.op('Reshape', [
    g.op('Transpose', [context], { perm: ints([0, 2, 1, 3]) }),
    g.shape('merge', [0, TOKENS, DIM]),
  ]);
  return linear(g, rng, merged, DIM, DIM, VIT_STD);
}

function mlp(g: Graph, rng: Rng, x: string): string {
  const h = linear(g, rng, x, DIM, 2 * DIM, VIT_STD);
  // QuickGELU, x * sigmoid(1.702 x): GELU without needing opset 20.
  const gelu = g.op('Mul', [h, g.op('Sigmoid', [g.op('Mul', [h, g.scalar('gelu', 1.702)])])]);
  return linear(g, rng, gelu, 2 * DIM, DIM, VIT_STD);
}

export function buildTileEmbed(): PackageBuild {
  const rng = new Rng(SEED);
  const g = new Graph('tile_embed');
  const image = normalizedImage(
    g,
    g.input('pixel_values', DType.UINT8, ['batch', 224, 224, 3]),
    [0.5, 0.5, 0.5],
    [0.5, 0.5, 0.5],
  );
  const patchW = g.constant('patch_w', rng.he(DIM * 3 * PATCH * PATCH, 3 * PATCH * PATCH), [DIM, 3, PATCH, PATCH]);
  const patches = g.op('Conv', [image, patchW], { kernel_shape: ints([PATCH, PATCH]), strides: ints([PATCH, PATCH]) });
  const tokens = g.op('Transpose', [g.op('Reshape', [patches, g.shape('tokens', [0, DIM, TOKENS])])], {
    perm: ints([0, 2, 1]),
  });
  const position = g.constant(
    'pos',
    Float32Array.from({ length: TOKENS * DIM }, () => rng.normal() * VIT_STD),
    [1, TOKENS, DIM],
  );
  let x = g.op('Add', [tokens, position]);
  for (let i = 0; i < DEPTH; i++) {
    x = g.op('Add', [x, attention(g, rng, layerNorm(g, x, DIM))]);
    x = g.op('Add', [x, mlp(g, rng, layerNorm(g, x, DIM))]);
  }
  const pooled = g.op('ReduceMean', [layerNorm(g, x, DIM)], { axes: ints([1]), keepdims: int(0) });
  l2normalize(g, pooled, 'last_hidden_mean');
  g.output('last_hidden_mean', DType.FLOAT, ['batch', DIM]);

  const method = `Seeded random weights (ViT-style init, std ${VIT_STD}; mulberry32 seed ${SEED}) written by tools/model-build/tile-embed.ts; NOT TRAINED: the embedding is a deterministic function of the pixels with no learned meaning.`;
  const manifest: Manifest = {
    name: 'tile-embed',
    version: '1.0.0',
    description:
      'Tile embedding from a small vision transformer (8x8 patches, 4 blocks, 160-d, mean-pooled) on 224x224 tiles at 0.5 MPP. Untrained weights.',
    license: 'Apache-2.0',
    tasks: ['embedding'],
    tile: { width: 224, height: 224, mpp: 0.5, mpp_tolerance: 0.1 },
    // The graph maps pixels to [-1, 1] itself.
    preprocess: { input: 'uint8', channel_order: 'RGB' },
    tensors: { image: 'pixel_values', embedding: 'last_hidden_mean' },
    embedding_dim: DIM,
    batch: { max: 16 },
    provenance: { trained: false, method },
  };
  return {
    manifest,
    model: g.serialize({ docString: manifest.description, metadata: { trained: 'false', provenance: method } }),
  };
}
