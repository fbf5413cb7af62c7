// The PNG rules, each with the PNG that breaks it; the bombs; the decoder against pngjs for every
// filter and layout; strict base64; a worker's typed decode failures, worded by the front.
import t, { type Test } from 'tap';
import { PNG } from 'pngjs';
import { deflateSync } from 'node:zlib';
import { decodePng } from '../../src/tile/png.js';
import { imageDataBytes, PngError, readPngHeader } from '../../src/tile/png-rules.js';
import type { CodesOf } from '../../src/lib/errors.js';
import { encodeRgbPng, pngChunk } from '../../src/tile/png-write.js';
import { decodeBase64Strict } from '../../src/tile/base64.js';
import { decodeTile } from '../../src/worker/tile-decoder.js';
import { decodeFailureItem } from '../../src/front/decode-failure.js';
import type { TileJob } from '../../src/ipc/protocol.js';
import { bombs, idatChunks, ihdr, noisePixels, png, rgbPng, scanlines, zeroStream } from '../png-forge.js';

function image(width: number, height: number): PNG {
  const png = new PNG({ width, height });
  for (let i = 0; i < png.data.length; i++) png.data[i] = i % 4 === 3 ? 255 - (i % 7) : (i * 7919 + (i >> 7)) % 251;
  return png;
}

async function refused(t: Test, bytes: Buffer, code: CodesOf<'PNG'>, msg: RegExp): Promise<void> {
  const err = await decodePng(bytes).then(
    () => null,
    (e: unknown) => e,
  );
  t.type(err, PngError, `${code}: refused with a PngError`);
  t.match(err, { code, rule: code.replace('TILE_ERR_PNG_', '').toLowerCase(), message: msg }, code);
}

const W = 16;
const H = 12;
const pixels = noisePixels(W, H, 3);
const header = ihdr({ width: W, height: H });
const data = deflateSync(scanlines(pixels, W, H, 3));
const iend = pngChunk('IEND');

t.test('the decoder equals pngjs for RGB and RGBA with each filter', async (t) => {
  for (const colorType of [2, 6] as const) {
    for (const filterType of [0, 1, 2, 3, 4]) {
      const bytes = PNG.sync.write(image(37, 19), { colorType, filterType });
      const ref = PNG.sync.read(bytes).data;
      const got = await decodePng(bytes);
      t.equal(got.channels, colorType === 2 ? 3 : 4);
      const expected =
        colorType === 6
          ? ref
          : Buffer.from(Array.from({ length: 37 * 19 * 3 }, (_, i) => ref[Math.floor(i / 3) * 4 + (i % 3)]));
      t.ok(Buffer.from(got.data).equals(expected), `colour type ${colorType}, filter ${filterType}`);
    }
  }
});

t.test('interlaced (Adam7) RGB and RGBA decode to the same pixels', async (t) => {
  for (const [w, h] of [
    [37, 19],
    [1, 1],
    [5, 3],
  ]) {
    for (const channels of [3, 4] as const) {
      const px = noisePixels(w, h, channels, w + channels);
      const got = await decodePng(rgbPng(px, w, h, channels, 1));
      t.match(got, { width: w, height: h, channels });
      t.ok(Buffer.from(got.data).equals(Buffer.from(px)), `${w}x${h}, ${channels} channels`);
    }
  }
  t.equal(
    imageDataBytes({ width: 1, height: 1, bitDepth: 8, colorType: 2, interlace: 1 }),
    4,
    'a 1x1 interlaced image has pass 1 only',
  );
});

t.test("the client's tile encoder: stored or deflated, the rules pass and the pixels come back", async (t) => {
  const px = noisePixels(37, 19, 3, 5);
  for (const level of [0, 1]) {
    const bytes = encodeRgbPng(px, 37, 19, level);
    const got = await decodePng(bytes);
    t.match(got, { width: 37, height: 19, channels: 3 });
    t.ok(Buffer.from(got.data).equals(Buffer.from(px)), `level ${level}`);
    t.ok(encodeRgbPng(px, 37, 19, level).equals(bytes), `level ${level}: the same bytes again`);
  }
});

t.test('other layouts (greyscale) go through pngjs after the same checks', async (t) => {
  const grey = PNG.sync.write(image(8, 8), { colorType: 0 });
  const px = await decodePng(grey);
  t.equal(px.channels, 4);
  t.ok(Buffer.from(px.data).equals(PNG.sync.read(grey).data));
  const corrupt = Buffer.from(grey);
  corrupt[45] ^= 1;
  await refused(t, corrupt, 'TILE_ERR_PNG_CRC', /chunk IDAT at byte 33 has a bad CRC/);
});

t.test('a valid hand-built PNG passes, ancillary chunks are ignored', async (t) => {
  const got = await decodePng(
    png(
      header,
      pngChunk('tEXt', Buffer.from('Comment\0tile')),
      pngChunk('abCd', Buffer.from('x')),
      pngChunk('IDAT', data),
      iend,
    ),
  );
  t.ok(Buffer.from(got.data).equals(Buffer.from(pixels)));
});

t.test('each PNG rule is a PngError with its code, naming what is wrong', async (t) => {
  const badCrc = png(header, pngChunk('IDAT', data, 0x12345678), iend);
  await refused(
    t,
    badCrc,
    'TILE_ERR_PNG_CRC',
    /chunk IDAT at byte 33 has a bad CRC \(stored 0x12345678, computed 0x[0-9a-f]{8}\)/,
  );
  await refused(
    t,
    png(header, pngChunk('tEXt', Buffer.from('a\0b'), 1), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_CRC',
    /chunk tEXt .* bad CRC/,
  );
  await refused(t, png(header, pngChunk('IDAT', data)), 'TILE_ERR_PNG_NO_IEND', /without an IEND chunk/);
  await refused(
    t,
    png(ihdr({ width: W, height: H, compression: 1 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /compression method is 1, expected 0/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, filter: 1 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /filter method is 1, expected 0/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, interlace: 2 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /interlace method is 2/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, bitDepth: 4 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /bit depth 4 is not allowed with colour type 2 \(allowed: 8, 16\)/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, colorType: 5 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /colour type is 5/,
  );
  await refused(t, png(ihdr({ width: 0, height: H }), pngChunk('IDAT', data), iend), 'TILE_ERR_PNG_IHDR', /width is 0/);
  await refused(
    t,
    png(pngChunk('IHDR', Buffer.alloc(12)), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /IHDR holds 12 bytes, 13 expected/,
  );
  await refused(
    t,
    png(pngChunk('tEXt', Buffer.from('a\0b')), header, pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_IHDR',
    /first chunk is not IHDR/,
  );
  await refused(
    t,
    Buffer.from('GIF89a and then some more bytes to be long enough'),
    'TILE_ERR_PNG_SIGNATURE',
    /PNG signature not found/,
  );
  await refused(
    t,
    png(header, header, pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_SECOND_IHDR',
    /a second IHDR chunk at byte 33/,
  );
  await refused(
    t,
    png(header, pngChunk('ABCD', Buffer.from('x')), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_UNKNOWN_CRITICAL_CHUNK',
    /unknown critical chunk ABCD/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', Buffer.concat([data, Buffer.from('extra')])), iend),
    'TILE_ERR_PNG_TRAILING_IMAGE_DATA',
    /5 bytes of trailing data after the zlib stream in IDAT/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', data), iend).subarray(0, 60),
    'TILE_ERR_PNG_CHUNK_BOUNDS',
    /chunk IDAT at byte 33 declares \d+ bytes of data, only \d+ are left/,
  );
  await refused(
    t,
    Buffer.concat([png(header, pngChunk('IDAT', data)), Buffer.from([0, 0, 0])]),
    'TILE_ERR_PNG_CHUNK_BOUNDS',
    /inside the chunk that starts/,
  );
  await refused(
    t,
    png(header, pngChunk('I D\0', Buffer.alloc(0)), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_CHUNK_TYPE',
    /expected 4 ASCII letters/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', data.subarray(0, 40)), iend),
    'TILE_ERR_PNG_SHORT_IMAGE_DATA',
    /zlib stream of the image data is truncated/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', deflateSync(Buffer.alloc(10))), iend),
    'TILE_ERR_PNG_SHORT_IMAGE_DATA',
    /inflates to 10 bytes, a 16x12 PNG needs 588/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', deflateSync(Buffer.alloc(589))), iend),
    'TILE_ERR_PNG_EXCESS_IMAGE_DATA',
    /inflates to more than the 588 bytes a 16x12 PNG needs/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', Buffer.from('not zlib at all')), iend),
    'TILE_ERR_PNG_ZLIB',
    /not a valid zlib stream/,
  );
  // The largest dimensions PNG allows: more bytes than a Buffer holds on any Node (2^32 on Node 20, 2^53 - 1 from 22).
  await refused(
    t,
    png(ihdr({ width: 2 ** 31 - 1, height: 2 ** 31 - 1 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_EXCESS_IMAGE_DATA',
    /2147483647x2147483647 PNG needs \d+ bytes of image data, more than a buffer holds/,
  );
  const badAdler = Buffer.from(data);
  badAdler[badAdler.length - 1] ^= 1;
  await refused(
    t,
    png(header, pngChunk('IDAT', badAdler), iend),
    'TILE_ERR_PNG_ZLIB',
    /not a valid zlib stream: incorrect data check/,
  );
  const [first, second] = [data.subarray(0, 20), data.subarray(20)];
  await refused(
    t,
    png(header, pngChunk('IDAT', first), pngChunk('tEXt', Buffer.from('a\0b')), pngChunk('IDAT', second), iend),
    'TILE_ERR_PNG_IDAT_ORDER',
    /IDAT chunks must be consecutive/,
  );
  await refused(t, png(header, iend), 'TILE_ERR_PNG_NO_IDAT', /no image data \(IDAT\) chunk/);
  await refused(
    t,
    Buffer.concat([png(header, pngChunk('IDAT', data), iend), Buffer.from('junk')]),
    'TILE_ERR_PNG_AFTER_IEND',
    /4 bytes after the IEND chunk/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', data), pngChunk('IEND', Buffer.from('x'))),
    'TILE_ERR_PNG_NO_IEND',
    /IEND chunk .* holds 1 bytes/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, colorType: 3 }), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_PLTE',
    /colour type 3 \(palette\) without a PLTE chunk/,
  );
  await refused(
    t,
    png(ihdr({ width: W, height: H, colorType: 0 }), pngChunk('PLTE', Buffer.alloc(3)), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_PLTE',
    /PLTE chunk in a colour type 0/,
  );
  await refused(
    t,
    png(header, pngChunk('PLTE', Buffer.alloc(4)), pngChunk('IDAT', data), iend),
    'TILE_ERR_PNG_PLTE',
    /PLTE holds 4 bytes/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', data), pngChunk('PLTE', Buffer.alloc(3)), iend),
    'TILE_ERR_PNG_PLTE',
    /PLTE chunk at byte \d+ after the image data/,
  );
  await refused(
    t,
    png(header, pngChunk('IDAT', data), pngChunk('tRNS', Buffer.alloc(6)), iend),
    'TILE_ERR_PNG_TRNS',
    /tRNS chunk at byte \d+ after the image data/,
  );
});

t.test('multi-IDAT image data is one stream; the header reader checks IHDR alone', async (t) => {
  const got = await decodePng(png(header, ...idatChunks(data, 7), iend));
  t.ok(Buffer.from(got.data).equals(Buffer.from(pixels)));
  t.match(readPngHeader(png(header)), { width: W, height: H, bitDepth: 8, colorType: 2, interlace: 0 });
  t.throws(() => readPngHeader(png(ihdr({ width: W, height: H, filter: 3 }))), {
    code: 'TILE_ERR_PNG_IHDR',
    message: /filter method is 3/,
  });
});

t.test('a bad scanline filter byte is refused by the decoder', async (t) => {
  const raw = scanlines(pixels, W, H, 3);
  raw[0] = 9;
  await t.rejects(decodePng(png(header, pngChunk('IDAT', deflateSync(raw)), iend)));
});

t.test('bombs: refused at the declared size, without inflating them', async (t) => {
  t.equal(zeroStream(64 << 20).length < 100_000, true, 'a 64 MiB stream of zeros takes under 100 kB');
  const rssBefore = process.memoryUsage().rss;
  for (const [kind, bytes] of Object.entries(bombs(4))) {
    if (kind === 'iCCP profile') {
      const px = await decodePng(bytes);
      t.equal(px.data.length, 224 * 224 * 3, 'an iCCP profile inflating to 4 GiB is left out of decoding');
    } else if (kind === 'trailing stream') {
      await refused(t, bytes, 'TILE_ERR_PNG_TRAILING_IMAGE_DATA', /bytes of trailing data after the zlib stream/);
    } else {
      await refused(
        t,
        bytes,
        'TILE_ERR_PNG_EXCESS_IMAGE_DATA',
        new RegExp(
          `inflates to more than the ${kind === 'interlaced' ? 150_948 : 150_752} bytes a 224x224${kind === 'interlaced' ? ' interlaced' : ''} PNG needs`,
        ),
      );
    }
  }
  const greyBomb = png(
    ihdr({ width: 224, height: 224, colorType: 0, interlace: 1 }),
    pngChunk('IDAT', zeroStream(1024 ** 3)),
    pngChunk('IEND'),
  );
  await refused(
    t,
    greyBomb,
    'TILE_ERR_PNG_EXCESS_IMAGE_DATA',
    /more than the \d+ bytes a 224x224 interlaced PNG needs/,
  );
  const grown = (process.memoryUsage().rss - rssBefore) / 2 ** 20;
  t.ok(grown < 256, `RSS grew ${grown.toFixed(0)} MiB over five 4 GiB bombs and a 1 GiB one for pngjs (bound 256 MiB)`);
});

t.test('strict standard base64; the URL-safe alphabet is refused by name', async (t) => {
  const bytes = Buffer.from([0xfb, 0xff, 0xbf, 1, 2, 3]);
  t.same(decodeBase64Strict(bytes.toString('base64')), { bytes });
  t.match(decodeBase64Strict(bytes.toString('base64url')), {
    reason:
      /URL-safe base64 alphabet \(- and _\), which is refused; expected standard base64 \(A-Z a-z 0-9 \+ \/, padded with = to a multiple of 4\)/,
  });
  t.match(decodeBase64Strict('abc$'), { reason: /characters outside standard base64/ });
  t.match(decodeBase64Strict('abc'), { reason: /3 characters, not a multiple of 4/ });
  t.match(decodeBase64Strict('ab=c'), { reason: /outside standard base64/ });
  // A JSON body's image_data comes as bytes, decoded a slice at a time, into a buffer of its own
  // (the front frees it once its tile is answered: src/front/free-bytes.ts), whatever the padding.
  for (const size of [60000, 60001, 60002]) {
    const png = Buffer.alloc(size, 9);
    png[size - 1] = 5;
    const decoded = decodeBase64Strict(Buffer.from(png.toString('base64'), 'latin1'));
    t.ok(
      'bytes' in decoded && decoded.bytes.equals(png) && decoded.bytes.buffer.byteLength === size,
      `${size} bytes: decoded whole, in a buffer of their own`,
    );
  }
  const text = Buffer.from(Buffer.alloc(60000, 9).toString('base64'), 'latin1');
  text[100] = 0x24;
  t.match(decodeBase64Strict(text), { reason: /outside standard base64/ }, 'bytes with a character outside it');
});

t.test("a worker's decode failures are typed; the front words each at the image's place", async (t) => {
  const job = (format: 'png' | 'rgb', bytes: Uint8Array, loc: string[]): TileJob => ({
    task: 'prediction',
    withEmbedding: false,
    image: { format, bytes, loc },
    width: 4,
    height: 4,
    bulk: null,
  });
  const failureOf = async (j: TileJob) => {
    const decoded = await decodeTile(j);
    if (!('failure' in decoded)) throw new Error('decoded');
    return decodeFailureItem(j.image.loc, decoded.failure);
  };
  t.same(await failureOf(job('rgb', new Uint8Array(47), ['body'])), {
    loc: ['body'],
    msg: 'Value error, a raw RGB body has width x height x 3 = 48 bytes, got 47',
    type: 'value_error',
  });
  t.match(await failureOf(job('png', Buffer.from('not a png'), ['body', 'image_data'])), {
    loc: ['body', 'image_data'],
    msg: /^Value error, image_data is not a decodable PNG: /,
  });
  t.match(await failureOf(job('png', Buffer.from('not a png'), ['body'])), {
    msg: /^Value error, the body is not a decodable PNG: /,
  });
  t.same(
    (await failureOf(job('png', rgbPng(noisePixels(5, 4, 3), 5, 4, 3), ['body', 'image_data']))).msg,
    'Value error, PNG is 5x4 pixels, expected width x height = 4x4',
  );
  t.ok(
    'pixels' in (await decodeTile(job('png', rgbPng(noisePixels(4, 4, 3), 4, 4, 3), ['body']))),
    'and a good tile decodes',
  );
});
