// gene-expr: a convolutional tile encoder plus a bulk-RNA branch; one forward pass yields the
// embedding [N,256] and the predicted expression [N,21]. Weights are seeded random, not trained.
import { Graph, Rng, DType, int } from './onnx-graph.js';
import { conv, linear, l2normalize, normalizedImage } from './layers.js';
import { PAM50, ONCOTYPE_DX_21 } from './gene-panels.js';
import type { Manifest } from '../../src/model-package/manifest.js';
import type { PackageBuild } from './package-build.js';

const SEED = 20261121;
const EMBEDDING_DIM = 256;
// ImageNet's statistics, applied in the graph to the uint8 tile.
const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];

export function buildGeneExpr(): PackageBuild {
  const rng = new Rng(SEED);
  const g = new Graph('gene_expr');
  const image = normalizedImage(g, g.input('image', DType.UINT8, ['N', 224, 224, 3]), MEAN, STD);
  const bulk = g.input('bulk', DType.FLOAT, ['N', PAM50.length]);

  // Stem to 112x112, then three stages of 3x3 convolutions (112 -> 56 -> 28): about 4 GFLOPs
  // per tile, the cost of the light end of real tile encoders (DenseNet-121, ResNet-50), with
  // under a million weights so the package stays small.
  let x = conv(g, rng, image, 3, 48, 2, 2);
  for (let i = 0; i < 3; i++) x = conv(g, rng, x, 48, 48, 3, 1);
  x = conv(g, rng, x, 48, 96, 3, 2);
  for (let i = 0; i < 2; i++) x = conv(g, rng, x, 96, 96, 3, 1);
  x = conv(g, rng, x, 96, 192, 3, 2);
  x = conv(g, rng, x, 192, 192, 3, 1);
  const pooled = g.op('Flatten', [g.op('GlobalAveragePool', [x])], {});
  const embedding = l2normalize(g, linear(g, rng, pooled, 192, EMBEDDING_DIM), 'embedding');

  const bulkFeatures = g.op('Relu', [linear(g, rng, bulk, PAM50.length, 64)]);
  const joint = g.op('Concat', [embedding, bulkFeatures], { axis: int(1) });
  const hidden = g.op('Relu', [linear(g, rng, joint, EMBEDDING_DIM + 64, 128)]);
  g.op('Softplus', [linear(g, rng, hidden, 128, ONCOTYPE_DX_21.length)], {}, 'prediction');
  g.output('embedding', DType.FLOAT, ['N', EMBEDDING_DIM]);
  g.output('prediction', DType.FLOAT, ['N', ONCOTYPE_DX_21.length]);

  const method = `Seeded random weights (He-normal, mulberry32 seed ${SEED}) written by tools/model-build/gene-expr.ts; NOT TRAINED: outputs are a deterministic function of pixels and bulk RNA with no biological validity.`;
  const manifest: Manifest = {
    name: 'gene-expr',
    version: '1.1.0',
    description:
      'Spatial gene-expression prediction (Oncotype DX 21 genes) from a 224x224 H&E tile at 0.5 MPP and an optional bulk RNA vector (PAM50 genes); also serves the tile embedding. Untrained weights.',
    license: 'Apache-2.0',
    tasks: ['prediction', 'embedding'],
    tile: { width: 224, height: 224, mpp: 0.5, mpp_tolerance: 0.1 },
    preprocess: { input: 'uint8', channel_order: 'RGB' },
    tensors: { image: 'image', bulk: 'bulk', prediction: 'prediction', embedding: 'embedding' },
    genes: {
      panel:
        'input: PAM50 (Parker et al., J Clin Oncol 2009); output: Oncotype DX 21-gene panel (Paik et al., N Engl J Med 2004). HGNC symbols.',
      input: PAM50,
      output: ONCOTYPE_DX_21,
      bulk_transform: 'log1p_cp10k',
    },
    embedding_dim: EMBEDDING_DIM,
    batch: { max: 16 },
    provenance: { trained: false, method },
  };
  return {
    manifest,
    model: g.serialize({ docString: manifest.description, metadata: { trained: 'false', provenance: method } }),
  };
}
