// The PNG decoder's fast path against pngjs, for every filter type and layout, and its errors.
import t from 'tap';
import { PNG } from 'pngjs';
import { decodePng, decodeBase64Strict, readPngHeader } from '../src/tile/png.js';

function image(width: number, height: number): PNG {
  const png = new PNG({ width, height });
  for (let i = 0; i < png.data.length; i++) png.data[i] = i % 4 === 3 ? 255 - (i % 7) : (i * 7919 + (i >> 7)) % 251;
  return png;
}

t.test('fast path equals pngjs for RGB and RGBA with each filter', async (t) => {
  for (const colorType of [2, 6] as const) {
    for (const filterType of [0, 1, 2, 3, 4]) {
      const bytes = PNG.sync.write(image(37, 19), { colorType, filterType });
      const ref = PNG.sync.read(bytes).data;
      const got = decodePng(bytes);
      t.equal(got.channels, colorType === 2 ? 3 : 4);
      const expected = colorType === 6 ? ref : Buffer.from(Array.from({ length: 37 * 19 * 3 }, (_, i) => ref[Math.floor(i / 3) * 4 + (i % 3)]));
      t.ok(Buffer.from(got.data).equals(expected), `colour type ${colorType}, filter ${filterType}`);
    }
  }
});

t.test('other layouts go through pngjs', async (t) => {
  const grey = PNG.sync.write(image(8, 8), { colorType: 0 });
  const px = decodePng(grey);
  t.equal(px.channels, 4);
  t.ok(Buffer.from(px.data).equals(PNG.sync.read(grey).data));
});

t.test('corrupt and truncated data throw with a reason', async (t) => {
  const bytes = PNG.sync.write(image(16, 16), { colorType: 2 });
  const corrupt = Buffer.from(bytes);
  corrupt.fill(0x55, 41, 60);
  t.throws(() => decodePng(corrupt));
  t.throws(() => decodePng(bytes.subarray(0, 50)), /runs past the end|no image data|unexpected end/);
});

t.test('header and strict base64', async (t) => {
  const bytes = PNG.sync.write(image(300, 200), { colorType: 2 });
  t.match(readPngHeader(bytes), { width: 300, height: 200, bitDepth: 8, colorType: 2, interlace: 0 });
  t.equal(readPngHeader(Buffer.from('GIF89a and so on, long enough')), null);
  t.ok(decodeBase64Strict(bytes.toString('base64'))?.equals(bytes));
  t.equal(decodeBase64Strict('abc$'), null, 'character outside the alphabet');
  t.equal(decodeBase64Strict('abc'), null, 'not a multiple of 4');
  t.equal(decodeBase64Strict('ab=c'), null, 'padding inside');
});
