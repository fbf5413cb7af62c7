// The image tensor from pixels: float32 NCHW normalized per channel, every pixel value in every
// channel order and pixel layout, against the per-pixel formula; float16 the same values, rounded.
import t from 'tap';
import type { Pixels } from '../../src/tile/png.js';
import { float32ToFloat16 } from '../../src/worker/float16.js';
import { makePreprocessor } from '../../src/worker/preprocess.js';
import { BGR_MEAN, BGR_STD, baseManifest } from '../helpers/export-models.js';

// A float image input normalized by ImageNet's statistics (the export packages' per-channel ones;
// the shipped models all take uint8 and normalize in their graphs).
const SCALE = 1 / 255;
const { R: mR, G: mG, B: mB } = BGR_MEAN;
const { R: sR, G: sG, B: sB } = BGR_STD;

/** A 16x16 tile whose channels each hold every byte value, in different orders. */
function tile(channels: 3 | 4, seed: number): Pixels {
  const data = new Uint8Array(256 * channels);
  for (let i = 0; i < 256; i++)
    for (let c = 0; c < channels; c++) data[i * channels + c] = (i * (2 * c + 1) + seed * 31) & 255;
  return { width: 16, height: 16, channels, data };
}

for (const order of ['RGB', 'BGR'] as const) {
  t.test(`float32 tensor, channel order ${order}: v * scale / std - mean / std in each tensor channel`, async (t) => {
    const manifest = baseManifest('x-float', {
      tile: { width: 16, height: 16, mpp: 0.5, mpp_tolerance: 0.1 },
      preprocess: { scale: SCALE, channel_order: order, mean: BGR_MEAN, std: BGR_STD },
    });
    const tiles = [tile(3, 1), tile(4, 2)];
    const tensor = makePreprocessor(manifest).tensor(tiles);
    t.same(tensor.dims, [2, 3, 16, 16]);
    const out = tensor.data as Float32Array;
    // Tensor channel c is the pixel's channel pixelChannel[c], with that colour's mean and std.
    const pixelChannel = order === 'RGB' ? [0, 1, 2] : [2, 1, 0];
    const mean = pixelChannel.map((p) => [mR, mG, mB][p]);
    const std = pixelChannel.map((p) => [sR, sG, sB][p]);
    let wrong = 0;
    tiles.forEach(({ data, channels }, n) => {
      for (let c = 0; c < 3; c++) {
        const a = SCALE / std[c];
        const b = -mean[c] / std[c];
        for (let i = 0; i < 256; i++) {
          const want = Math.fround(data[i * channels + pixelChannel[c]] * a + b);
          if (out[n * 3 * 256 + c * 256 + i] !== want) wrong++;
        }
      }
    });
    t.equal(wrong, 0, 'every value as the formula gives it, bit for bit');
  });
}

t.test('float16 tensor: the float32 values rounded to half, written into the buffer the session gives', async (t) => {
  const manifest = baseManifest('x-half', {
    tile: { width: 16, height: 16, mpp: 0.5, mpp_tolerance: 0.1 },
    preprocess: { scale: SCALE, channel_order: 'BGR', mean: BGR_MEAN, std: BGR_STD },
  });
  const given: ArrayBuffer[] = [];
  // Each buffer full of another batch's bytes, as a spare one is.
  const half = makePreprocessor(manifest, 'float16', (bytes) => {
    given.push(new Uint8Array(bytes).fill(0xab).buffer);
    return given.at(-1)!;
  });
  const single = makePreprocessor(manifest, 'float32');
  // Larger, smaller, then larger again than any before: the float32 scratch is kept between them.
  for (const tiles of [[tile(3, 1), tile(4, 2)], [tile(4, 3)], [tile(3, 4), tile(3, 5), tile(4, 6)]]) {
    const tensor = half.tensor(tiles);
    t.equal(tensor.type, 'float16');
    t.same(tensor.dims, [tiles.length, 3, 16, 16]);
    const bits = tensor.data as Uint16Array;
    t.equal(bits.buffer, given.at(-1), `${tiles.length} tiles: in the buffer given`);
    t.equal(bits.byteLength, tiles.length * 3 * 256 * 2, 'two bytes a value');
    t.same(bits, float32ToFloat16(single.tensor(tiles).data as Float32Array), 'the float32 values, in half');
  }
});
