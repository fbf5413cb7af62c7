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
// Morphology uses separable max-pooling (k + k instead of k^2 comparisons per pixel).
import { Graph, DType, int, ints } from './onnx-graph.js';
import type { Manifest } from '../model-package/manifest.js';
import type { PackageBuild } from './package-build.js';

export const DETECTOR = { blur: 5, chroma: 0.03, opticalDensity: 0.7, close: 9, open: 5 };

function maxPool(g: Graph, x: string, k: number): string {
  const p = Math.floor(k / 2);
  const rows = g.op('MaxPool', [x], { kernel_shape: ints([1, k]), pads: ints([0, p, 0, p]) });
  return g.op('MaxPool', [rows], { kernel_shape: ints([k, 1]), pads: ints([p, 0, p, 0]) });
}
const dilate = maxPool;
const erode = (g: Graph, x: string, k: number) => g.op('Neg', [maxPool(g, g.op('Neg', [x]), k)]);

export function buildTissueSeg(): PackageBuild {
  const g = new Graph('tissue_seg');
  const image = g.input('image', DType.FLOAT, ['N', 3, 'H', 'W']);
  const b = DETECTOR.blur;
  const p = Math.floor(b / 2);
  const smooth = g.op('AveragePool', [image], { kernel_shape: ints([b, b]), pads: ints([p, p, p, p]), count_include_pad: int(0) });
  const chroma = g.op('Sub', [
    g.op('ReduceMax', [smooth], { axes: ints([1]), keepdims: int(1) }),
    g.op('ReduceMin', [smooth], { axes: ints([1]), keepdims: int(1) }),
  ]);
  const brightness = g.op('ReduceMean', [smooth], { axes: ints([1]), keepdims: int(1) });
  const density = g.op('Neg', [g.op('Log', [g.op('Max', [brightness, g.scalar('floor', 1 / 255)])])]);
  const evidence = g.op('Max', [
    g.op('Mul', [chroma, g.scalar('chroma_gain', 1 / DETECTOR.chroma)]),
    g.op('Mul', [density, g.scalar('density_gain', 1 / DETECTOR.opticalDensity)]),
  ]);
  let m = g.op('Cast', [g.op('Greater', [evidence, g.scalar('one', 1)])], { to: int(DType.FLOAT) });
  m = erode(g, dilate(g, m, DETECTOR.close), DETECTOR.close);
  m = dilate(g, erode(g, m, DETECTOR.open), DETECTOR.open);
  g.op('Cast', [m], { to: int(DType.UINT8) }, 'mask');
  g.output('mask', DType.UINT8, ['N', 1, 'H', 'W']);

  const method = `Hand-designed detector, no learned weights (src/model-build/tissue-seg.ts): ${JSON.stringify(DETECTOR)}. Evaluated on the synthetic H&E/IHC fixtures in test/fixtures/tissue.`;
  const manifest: Manifest = {
    name: 'tissue-seg',
    version: '1.0.0',
    description: 'Tissue detection on 512x512 tiles at 8.0 MPP: stain chroma and optical density against a bright neutral glass model, with morphological closing and opening. Finds pale stroma, fat and loose connective tissue that saturation+Otsu misses; ignores dust and glass texture.',
    license: 'Apache-2.0',
    tasks: ['segmentation'],
    tile: { width: 512, height: 512, mpp: 8.0, mpp_tolerance: 0.1 },
    preprocess: { scale: 1 / 255, mean: [0, 0, 0], std: [1, 1, 1], channel_order: 'RGB' },
    tensors: { image: 'image', mask: 'mask' },
    batch: { max: 8 },
    provenance: { trained: false, method },
  };
  return { manifest, model: g.serialize({ docString: manifest.description, metadata: { trained: 'false', provenance: method } }) };
}
