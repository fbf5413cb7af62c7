// Pixels to the model's image tensor, as the manifest's preprocess section says: float32 NCHW
// normalized here, or uint8 NHWC handed over as decoded (the graph normalizes, in ONNX
// Runtime's kernels instead of a JS loop; a batch of one RGB tile is passed without a copy).
import ort from 'onnxruntime-node';
import type { Manifest } from '../model-package/manifest.js';
import type { Pixels } from '../tile/png.js';

export interface Preprocessor {
  tensor(tiles: Pixels[]): ort.Tensor;
}

export function makePreprocessor(manifest: Manifest): Preprocessor {
  const { width, height } = manifest.tile;
  const plane = width * height;
  const p = manifest.preprocess;
  const source = p.channel_order === 'RGB' ? [0, 1, 2] : [2, 1, 0];

  if (p.input === 'uint8') {
    const size = plane * 3;
    return {
      tensor(tiles) {
        const passThrough = tiles.length === 1 && tiles[0].channels === 3 && p.channel_order === 'RGB';
        const out = passThrough ? tiles[0].data : new Uint8Array(tiles.length * size);
        if (!passThrough) {
          tiles.forEach(({ data, channels }, t) => {
            if (channels === 3 && p.channel_order === 'RGB') return out.set(data, t * size);
            for (let i = 0, j = 0, o = t * size; i < plane; i++, j += channels, o += 3) {
              out[o] = data[j + source[0]];
              out[o + 1] = data[j + source[1]];
              out[o + 2] = data[j + source[2]];
            }
          });
        }
        return new ort.Tensor('uint8', out, [tiles.length, height, width, 3]);
      },
    };
  }

  // v * scale - mean / std, precomputed as v * a + b per channel.
  const a = [0, 1, 2].map((c) => p.scale / p.std[c]);
  const b = [0, 1, 2].map((c) => -p.mean[c] / p.std[c]);
  const size = plane * 3;
  return {
    tensor(tiles) {
      const out = new Float32Array(tiles.length * size);
      tiles.forEach(({ data, channels }, t) => {
        for (let c = 0; c < 3; c++) {
          const ac = a[c];
          const bc = b[c];
          const base = t * size + c * plane;
          for (let i = 0, j = source[c]; i < plane; i++, j += channels) out[base + i] = data[j] * ac + bc;
        }
      });
      return new ort.Tensor('float32', out, [tiles.length, 3, height, width]);
    },
  };
}
