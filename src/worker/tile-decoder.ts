// Turns a TileJob's base64 PNG into the model's input pixels, or into field errors naming what was
// expected. Runs in the worker so decoding spreads across worker processes.
import { PNG } from 'pngjs';
import type { FieldError, TileJob } from '../ipc/protocol.js';
import type { Manifest } from '../model-package/manifest.js';
import { decodeBase64Strict, readPngHeader } from '../tile/png.js';

const IMAGE_LOC = ['body', 'image_data'];

export type Decoded = { rgba: Buffer; base64Ms: number; decodeMs: number } | { errors: FieldError[] };

export function decodeTile(job: TileJob): Decoded {
  const t0 = performance.now();
  const bytes = decodeBase64Strict(job.imageBase64);
  if (!bytes) return { errors: [{ loc: IMAGE_LOC, msg: 'Base64 decoding error: image_data should be standard base64 text (A-Z a-z 0-9 + /, padded with = to a multiple of 4)', type: 'base64_decode' }] };
  const t1 = performance.now();
  const header = readPngHeader(bytes);
  if (!header) return { errors: [{ loc: IMAGE_LOC, msg: 'Value error, image_data should be a PNG image (PNG signature and IHDR chunk not found)', type: 'value_error' }] };
  if (header.width !== job.width || header.height !== job.height) {
    return { errors: [{ loc: IMAGE_LOC, msg: `Value error, PNG is ${header.width}x${header.height} pixels, expected width x height = ${job.width}x${job.height}`, type: 'value_error' }] };
  }
  let png: PNG;
  try {
    png = PNG.sync.read(bytes);
  } catch (err) {
    return { errors: [{ loc: IMAGE_LOC, msg: `Value error, image_data is not a decodable PNG: ${(err as Error).message}`, type: 'value_error' }] };
  }
  return { rgba: png.data, base64Ms: t1 - t0, decodeMs: performance.now() - t1 };
}

/** Per-channel affine map v*scale - mean / std, precomputed as v*a + b, in the manifest's channel order. */
export function makePreprocessor(manifest: Manifest) {
  const { scale, mean, std, channel_order } = manifest.preprocess;
  const source = channel_order === 'RGB' ? [0, 1, 2] : [2, 1, 0];
  const a = [0, 1, 2].map((c) => scale / std[c]);
  const b = [0, 1, 2].map((c) => -mean[c] / std[c]);
  const plane = manifest.tile.width * manifest.tile.height;
  return {
    size: 3 * plane,
    /** Writes the tile as CHW float32 into `out` at `offset`. */
    write(rgba: Buffer, out: Float32Array, offset: number): void {
      for (let c = 0; c < 3; c++) {
        const ac = a[c];
        const bc = b[c];
        const base = offset + c * plane;
        for (let i = 0, j = source[c]; i < plane; i++, j += 4) out[base + i] = rgba[j] * ac + bc;
      }
    },
  };
}
export type Preprocessor = ReturnType<typeof makePreprocessor>;
