// Small model packages shaped like torch.onnx.export output, each with one of the dtypes and
// shapes real exports have (class-channel logits, int64/uint8/float16/int32/float64 outputs,
// float16 input, a fixed batch of 1, BGR input), built with the project's ONNX writer, and the
// answers they must give, computed here in plain JS from the tile's pixels.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Graph, DType, int, ints, type Dim, type DTypeId } from '../../tools/model-build/onnx-graph.js';
import type { Manifest } from '../../src/model-package/manifest.js';
import type { Pixels } from '../../src/tile/png.js';

export const SIZE = 64;
/** A 1x1 convolution from RGB to two classes, as the interop packages: dyadic weights. */
const W = [
  [0.5, -0.25, 0.125],
  [-0.375, 0.25, 0.5],
];
const B = [0.0625, -0.125];
const MEAN = 0.5;
const STD = 0.25;

export function baseManifest(name: string, fields: Partial<Manifest>): Manifest {
  return {
    name,
    version: '0',
    description: 'export-shaped test package',
    license: 'CC0-1.0',
    tasks: ['prediction'],
    tile: { width: SIZE, height: SIZE, mpp: 0.5, mpp_tolerance: 0.1 },
    preprocess: { scale: 1 / 255, mean: [MEAN, MEAN, MEAN], std: [STD, STD, STD], channel_order: 'RGB' },
    tensors: { image: 'image', prediction: 'pred' },
    batch: { max: 8 },
    provenance: { trained: false, method: 'test fixture' },
    ...fields,
  };
}

const conv = (g: Graph, x: string) =>
  g.op('Conv', [
    x,
    g.constant('conv_w', Float32Array.from(W.flat()), [2, 3, 1, 1]),
    g.constant('conv_b', Float32Array.from(B), [2]),
  ]);

/** image [N, 3, 64, 64] (float32, or float16 cast up) through the 1x1 convolution. */
function logits(g: Graph, imageType: DTypeId = DType.FLOAT, batch: Dim = 'batch_size'): string {
  let x = g.input('image', imageType, [batch, 3, SIZE, SIZE]);
  if (imageType !== DType.FLOAT) x = g.op('Cast', [x], { to: int(DType.FLOAT) });
  return conv(g, x);
}

/** The decoded uint8 tile [N, 64, 64, 3] through the same convolution, unnormalized: exact logits. */
function uint8Logits(g: Graph): string {
  const image = g.input('image', DType.UINT8, ['batch_size', SIZE, SIZE, 3]);
  return conv(g, g.op('Transpose', [g.op('Cast', [image], { to: int(DType.FLOAT) })], { perm: ints([0, 3, 1, 2]) }));
}
const meanOverPixels = (g: Graph, x: string) => g.op('ReduceMean', [x], { axes: ints([2, 3]), keepdims: int(0) });

export interface ExportPackage {
  manifest: Manifest;
  graph: Graph;
}

function pkg(name: string, fields: Partial<Manifest>, build: (g: Graph) => void): ExportPackage {
  const graph = new Graph('main_graph');
  build(graph);
  return { manifest: baseManifest(name, fields), graph };
}

/** Every export shape the service must serve. */
export function exportPackages(): ExportPackage[] {
  return [
    // Two-class segmentation logits over the decoded uint8 tile, without normalization, so
    // every logit is exact and ties (argmax takes the first class) are part of the answer.
    pkg(
      'x-seg-c2',
      {
        tasks: ['segmentation'],
        preprocess: { input: 'uint8', channel_order: 'RGB' },
        tensors: { image: 'image', mask: 'logits' },
        mask_channel: { index: 1, rule: 'argmax' },
      },
      (g) => {
        g.op('Identity', [uint8Logits(g)], {}, 'logits');
        g.output('logits', DType.FLOAT, ['batch_size', 2, SIZE, SIZE]);
      },
    ),
    // The same, exported after torch.argmax: an int64 [N, H, W] class map (tissue where not 0).
    pkg(
      'x-seg-int64',
      {
        tasks: ['segmentation'],
        preprocess: { input: 'uint8', channel_order: 'RGB' },
        tensors: { image: 'image', mask: 'classes' },
      },
      (g) => {
        g.op('ArgMax', [uint8Logits(g)], { axis: int(1), keepdims: int(0) }, 'classes');
        g.output('classes', DType.INT64, ['batch_size', SIZE, SIZE]);
      },
    ),
    pkg('x-int64', { tensors: { image: 'image', prediction: 'pred' } }, (g) => {
      g.op('ArgMax', [meanOverPixels(g, logits(g))], { axis: int(1), keepdims: int(1) }, 'pred');
      g.output('pred', DType.INT64, ['batch_size', 1]);
    }),
    pkg('x-uint8', {}, (g) => {
      const scaled = g.op('Mul', [g.op('Sigmoid', [meanOverPixels(g, logits(g))]), g.scalar('c255', 255)]);
      g.op('Cast', [g.op('Floor', [scaled])], { to: int(DType.UINT8) }, 'pred');
      g.output('pred', DType.UINT8, ['batch_size', 2]);
    }),
    pkg('x-fp16-out', {}, (g) => {
      g.op('Cast', [meanOverPixels(g, logits(g))], { to: int(DType.FLOAT16) }, 'pred');
      g.output('pred', DType.FLOAT16, ['batch_size', 2]);
    }),
    // As torch exports a .half() model: no preprocess.input, the graph's image is float16.
    pkg('x-fp16-in', {}, (g) => {
      g.op('Identity', [meanOverPixels(g, logits(g, DType.FLOAT16))], {}, 'pred');
      g.output('pred', DType.FLOAT, ['batch_size', 2]);
    }),
    pkg('x-static', {}, (g) => {
      g.op('Identity', [meanOverPixels(g, logits(g, DType.FLOAT, 1))], {}, 'pred');
      g.output('pred', DType.FLOAT, [1, 2]);
    }),
    // int32 prediction and float64 embedding from one pass.
    pkg(
      'x-int32-f64',
      {
        tasks: ['prediction', 'embedding'],
        tensors: { image: 'image', prediction: 'pred', embedding: 'emb' },
        embedding_dim: 2,
      },
      (g) => {
        const mean = meanOverPixels(g, logits(g));
        g.op('Cast', [g.op('Floor', [g.op('Mul', [mean, g.scalar('c100', 100)])])], { to: int(DType.INT32) }, 'pred');
        g.op('Cast', [mean], { to: int(DType.DOUBLE) }, 'emb');
        g.output('pred', DType.INT32, ['batch_size', 2]);
        g.output('emb', DType.DOUBLE, ['batch_size', 2]);
      },
    ),
    // The per-channel mean of the image tensor as it reaches the graph: shows which mean/std
    // went to which channel.
    pkg('x-bgr', { preprocess: { scale: 1 / 255, mean: BGR_MEAN, std: BGR_STD, channel_order: 'BGR' } }, (g) => {
      g.op('Identity', [meanOverPixels(g, g.input('image', DType.FLOAT, ['batch_size', 3, SIZE, SIZE]))], {}, 'pred');
      g.output('pred', DType.FLOAT, ['batch_size', 3]);
    }),
  ];
}
export const BGR_MEAN = { R: 0.485, G: 0.456, B: 0.406 };
export const BGR_STD = { R: 0.229, G: 0.224, B: 0.225 };

export function writeExportPackage(root: string, { manifest, graph }: ExportPackage): string {
  const dir = join(root, manifest.name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'model.onnx'),
    graph.serialize({ docString: 'torch-export-shaped test package', metadata: {} }).model,
  );
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  return dir;
}

/** Rounds to the nearest float16 (ties to even), by scaling to its 11-bit significand. */
export function roundToHalf(x: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const exponent = Math.max(Math.floor(Math.log2(Math.abs(x))), -14);
  const ulp = 2 ** (exponent - 10);
  const q = x / ulp;
  const r = Math.round(q);
  const even = Math.abs(q - Math.trunc(q)) === 0.5 ? 2 * Math.round(q / 2) : r;
  return even * ulp;
}

/** What each package must answer for a tile, computed from its pixels in float64. */
export function expectedAnswer(name: string, tile: Pixels): number[] {
  const { data, channels } = tile;
  const plane = SIZE * SIZE;
  const pixel = (p: number, c: number) => data[p * channels + c];
  const normalized = (p: number, c: number, half = false) => {
    const v = (pixel(p, c) / 255 - MEAN) / STD;
    return half ? roundToHalf(v) : v;
  };
  const classMeans = (half = false) =>
    [0, 1].map((k) => {
      let sum = 0;
      for (let p = 0; p < plane; p++)
        sum +=
          W[k][0] * normalized(p, 0, half) + W[k][1] * normalized(p, 1, half) + W[k][2] * normalized(p, 2, half) + B[k];
      return sum / plane;
    });
  switch (name) {
    case 'x-seg-c2':
    case 'x-seg-c2-float-argmax':
    case 'x-seg-int64':
      return Array.from({ length: plane }, (_, p) => {
        const [l0, l1] = [0, 1].map(
          (k) => W[k][0] * pixel(p, 0) + W[k][1] * pixel(p, 1) + W[k][2] * pixel(p, 2) + B[k],
        );
        return l1 > l0 ? 1 : 0;
      });
    case 'x-int64': {
      const [m0, m1] = classMeans();
      return [m1 > m0 ? 1 : 0];
    }
    case 'x-uint8':
      return classMeans().map((m) => Math.floor(255 / (1 + Math.exp(-m))));
    case 'x-fp16-out':
      return classMeans().map(roundToHalf);
    case 'x-fp16-in':
      return classMeans(true);
    case 'x-static':
      return classMeans();
    case 'x-int32-f64':
      return classMeans().map((m) => Math.floor(m * 100));
    case 'x-bgr': {
      // Tensor channel 0 is blue: (B / 255 - mean.B) / std.B, and so on.
      return (['B', 'G', 'R'] as const).map((name, c) => {
        let sum = 0;
        for (let p = 0; p < plane; p++) sum += (pixel(p, 2 - c) / 255 - BGR_MEAN[name]) / BGR_STD[name];
        return sum / plane;
      });
    }
    default:
      throw new Error(`no expected answer for ${name}`);
  }
}

/** Two-class float logits [N, 2, H, W] over a float32 image tensor, as torch exports a
 *  segmentation model, with a manifest that sets mask_threshold but not which channel is tissue:
 *  refused at load naming mask_channel. Preprocessing passes the pixels through (scale 1, mean 0,
 *  std 1), so every logit is exact and the argmax mask is x-seg-c2's. */
export function floatSegPackage(): ExportPackage {
  return pkg(
    'x-seg-c2-float',
    {
      tasks: ['segmentation'],
      preprocess: { scale: 1, mean: [0, 0, 0], std: [1, 1, 1], channel_order: 'RGB' },
      tensors: { image: 'image', mask: 'logits' },
      mask_threshold: 0,
    },
    (g) => {
      g.op('Identity', [logits(g)], {}, 'logits');
      g.output('logits', DType.FLOAT, ['batch_size', 2, SIZE, SIZE]);
    },
  );
}

/** Segmentation logits whose every dimension is symbolic (as DeepLabV3 exports them) and a
 *  manifest that does not say which channel is tissue: only warm-up can see the misfit. */
export function symbolicSegPackage(): ExportPackage {
  return pkg(
    'x-seg-symbolic',
    { tasks: ['segmentation'], tensors: { image: 'image', mask: 'logits' }, mask_threshold: 0 },
    (g) => {
      // Reshape to its own runtime shape: ONNX Runtime's shape inference cannot see through it.
      const x = logits(g);
      g.op('Reshape', [x, g.op('Shape', [x])], {}, 'logits');
      g.output('logits', DType.FLOAT, ['batch_size', 'num_classes', 'height', 'width']);
    },
  );
}
