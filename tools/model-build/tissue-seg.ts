// tissue-seg: a colour-and-density tissue detector for 8.0 MPP tiles, written as an ONNX graph so
// a learned segmentation export can replace it by swapping the package.
//
// Why not saturation + Otsu: Otsu splits the tile into its two most different populations, which
// on a tile with dense stain are "dense" and "everything else", so pale stroma, fat and loose
// connective tissue fall on the glass side. Glass, though, has a known appearance: bright and
// neutral (R = G = B up to noise). So this detector thresholds against glass, not against the tile:
//   1. denoise with a 5x5 mean filter (removes sensor noise and faint glass texture);
//   2. chroma = max(R,G,B) - min(R,G,B); any stain (eosin pink, hematoxylin blue, DAB brown)
//      lifts it, even when very pale; optical density catches very dark neutral material;
//   3. tissue where chroma > 0.03 or OD > 0.7;
//   4. closing (9 px, 72 um) fills fat vacuoles and gaps in loose tissue; opening (5 px, 40 um)
//      removes dust specks and fibres smaller than a small tissue fragment.
// The mean filter and the morphology are separable (k + k instead of k^2 operations per pixel),
// and the graph takes the decoded uint8 RGB tile [N, H, W, 3] and scales it itself.
import { Graph, DType, int, ints, type Attr } from './onnx-graph.js';
import type { Manifest } from '../../src/model-package/manifest.js';
import type { PackageBuild } from './package-build.js';

export const DETECTOR = { blur: 5, chroma: 0.03, opticalDensity: 0.7, close: 9, open: 5 };

/** A k x k pooling as a 1 x k pass then a k x 1 pass; exact for max, and for a mean that counts
 *  only pixels inside the image (the clipped window is still a rectangle). */
function separable(g: Graph, op: 'MaxPool' | 'AveragePool', x: string, k: number): string {
  const p = Math.floor(k / 2);
  const extra: Record<string, Attr> = op === 'AveragePool' ? { count_include_pad: int(0) } : {};
  const rows = g.op(op, [x], { kernel_shape: ints([1, k]), pads: ints([0, p, 0, p]), ...extra });
  return g.op(op, [rows], { kernel_shape: ints([k, 1]), pads: ints([p, 0, p, 0]), ...extra });
}
const maxPool = (g: Graph, x: string, k: number) => separable(g, 'MaxPool', x, k);
const dilate = maxPool;
/** A kernel of k full-resolution pixels at half resolution (odd, so it stays centred). */
const HALF = (k: number) => Math.floor(k / 2) | 1;
const erode = (g: Graph, x: string, k: number) => g.op('Neg', [maxPool(g, g.op('Neg', [x]), k)]);

export function buildTissueSeg(): PackageBuild {
  const g = new Graph('tissue_seg');
  const image = g.input('image', DType.UINT8, ['N', 'H', 'W', 3]);
  // Channels sliced off the NHWC tile; [N, H, W, 1] re-labelled [N, 1, H, W] costs no copy.
  // Values stay in 0..255: the thresholds are scaled instead of every pixel.
  const pixels = g.op('Cast', [image], { to: int(DType.FLOAT) });
  const [r, gr, b] = ['r', 'g', 'b'].map((c, i) => {
    const channel = g.op('Slice', [
      pixels,
      g.shape(`${c}_start`, [i]),
      g.shape(`${c}_end`, [i + 1]),
      g.shape(`${c}_axis`, [3]),
    ]);
    const nchw = g.op('Unsqueeze', [
      g.op('Squeeze', [channel, g.shape(`${c}_last`, [3])]),
      g.shape(`${c}_second`, [1]),
    ]);
    return separable(g, 'AveragePool', nchw, DETECTOR.blur);
  });
  const chroma = g.op('Sub', [g.op('Max', [r, gr, b]), g.op('Min', [r, gr, b])]);
  // OD = -ln(mean brightness / 255) > t  <=>  R + G + B < 3 * 255 * exp(-t).
  const dark = g.op('Less', [g.op('Sum', [r, gr, b]), g.scalar('dark', 3 * 255 * Math.exp(-DETECTOR.opticalDensity))]);
  const stained = g.op('Greater', [chroma, g.scalar('stained', 255 * DETECTOR.chroma)]);
  let m = g.op('Cast', [g.op('Or', [stained, dark])], { to: int(DType.FLOAT) });
  // Morphology at half resolution (a 2x2 cell is tissue when at least half its pixels are),
  // then back up: 4x fewer pixels for the eight pooling passes.
  const cells = g.op('AveragePool', [m], { kernel_shape: ints([2, 2]), strides: ints([2, 2]) });
  m = g.op('Cast', [g.op('Greater', [cells, g.scalar('half', 0.4)])], { to: int(DType.FLOAT) });
  m = erode(g, dilate(g, m, HALF(DETECTOR.close)), HALF(DETECTOR.close));
  m = dilate(g, erode(g, m, HALF(DETECTOR.open)), HALF(DETECTOR.open));
  m = g.op('Resize', [m, '', g.constant('scales', Float32Array.of(1, 1, 2, 2), [4])], { mode: { s: 'nearest' } });
  g.op('Cast', [m], { to: int(DType.UINT8) }, 'mask');
  g.output('mask', DType.UINT8, ['N', 1, 'H', 'W']);

  const method = `Hand-designed detector, no learned weights (tools/model-build/tissue-seg.ts): ${JSON.stringify(DETECTOR)}. Evaluated on the synthetic H&E/IHC fixtures in test/fixtures/tissue.`;
  const manifest: Manifest = {
    name: 'tissue-seg',
    version: '1.0.0',
    description:
      'Tissue detection on 512x512 tiles at 8.0 MPP: stain chroma and optical density against a bright neutral glass model, with morphological closing and opening. Finds pale stroma, fat and loose connective tissue that saturation+Otsu misses; ignores dust and glass texture.',
    license: 'Apache-2.0',
    tasks: ['segmentation'],
    tile: { width: 512, height: 512, mpp: 8.0, mpp_tolerance: 0.1 },
    preprocess: { input: 'uint8', channel_order: 'RGB' },
    tensors: { image: 'image', mask: 'mask' },
    batch: { max: 8 },
    provenance: { trained: false, method },
  };
  return {
    manifest,
    model: g.serialize({ docString: manifest.description, metadata: { trained: 'false', provenance: method } }),
  };
}
