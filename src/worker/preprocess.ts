// Pixels to the model's image tensor, as the manifest's preprocess section says: float32 (or
// float16) NCHW normalized here, or uint8 NHWC handed over as decoded (the graph normalizes, in ONNX
// Runtime's kernels instead of a JS loop; a batch of one RGB tile is passed without a copy).
import ort from '../lib/onnxruntime.js';
import { inTensorOrder, type ImageInput, type Manifest } from '../model-package/manifest.js';
import type { Pixels } from '../tile/png.js';
import { float32ToFloat16 } from './float16.js';

export interface Preprocessor {
  tensor(tiles: Pixels[]): ort.Tensor;
}

/** `input` is the plan's image input: the manifest's, or the graph's float type when omitted.
 *  `buffer` gives the tensor's memory (the session's spare buffers: every byte is written here). */
export function makePreprocessor(
  manifest: Manifest,
  input: ImageInput = manifest.preprocess.input ?? 'float32',
  buffer: (bytes: number) => ArrayBuffer = (bytes) => new ArrayBuffer(bytes),
): Preprocessor {
  const { width, height } = manifest.tile;
  const plane = width * height;
  const p = manifest.preprocess;
  const source = p.channel_order === 'RGB' ? [0, 1, 2] : [2, 1, 0];

  if (input === 'uint8') {
    const size = plane * 3;
    return {
      tensor(tiles) {
        const passThrough = tiles.length === 1 && tiles[0].channels === 3 && p.channel_order === 'RGB';
        const out = passThrough ? tiles[0].data : new Uint8Array(buffer(tiles.length * size));
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

  // (v * scale - mean) / std, precomputed as v * a + b per tensor channel.
  const mean = inTensorOrder(p.mean!, p.channel_order);
  const std = inTensorOrder(p.std!, p.channel_order);
  const a = [0, 1, 2].map((c) => p.scale! / std[c]);
  const b = [0, 1, 2].map((c) => -mean[c] / std[c]);
  const size = plane * 3;
  // float16 is normalized in float32 first (rounded as ONNX Runtime's Cast would), in this scratch
  // kept from batch to batch: a fresh one faults in every page (32 tiles of 224 px: 19 MB).
  let scratch = new Float32Array(0);
  return {
    tensor(tiles) {
      const n = tiles.length * size;
      if (input === 'float16' && scratch.length < n) scratch = new Float32Array(n);
      const out = input === 'float16' ? scratch.subarray(0, n) : new Float32Array(buffer(n * 4));
      tiles.forEach(({ data, channels }, t) => {
        for (let c = 0; c < 3; c++) {
          const ac = a[c];
          const bc = b[c];
          const base = t * size + c * plane;
          for (let i = 0, j = source[c]; i < plane; i++, j += channels) out[base + i] = data[j] * ac + bc;
        }
      });
      const dims = [tiles.length, 3, height, width];
      return input === 'float16'
        ? new ort.Tensor('float16', float32ToFloat16(out, new Uint16Array(buffer(n * 2))), dims)
        : new ort.Tensor('float32', out, dims);
    },
  };
}
