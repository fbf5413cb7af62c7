// Hand-built PNGs for the PNG rule and bomb tests: chunks with right or wrong CRCs, any IHDR,
// Adam7 interlacing, and zlib streams of zeros that inflate to gigabytes from about a megabyte.
import { constants, deflateRawSync, deflateSync } from 'node:zlib';
import { ADAM7, PNG_SIGNATURE } from '../src/tile/png-rules.js';
import { pngChunk } from '../src/tile/png-write.js';

export interface Ihdr {
  width: number;
  height: number;
  bitDepth?: number;
  colorType?: number;
  compression?: number;
  filter?: number;
  interlace?: number;
}

export function ihdr(h: Ihdr): Buffer {
  const d = Buffer.alloc(13);
  d.writeUInt32BE(h.width, 0);
  d.writeUInt32BE(h.height, 4);
  d[8] = h.bitDepth ?? 8;
  d[9] = h.colorType ?? 2;
  d[10] = h.compression ?? 0;
  d[11] = h.filter ?? 0;
  d[12] = h.interlace ?? 0;
  return pngChunk('IHDR', d);
}

/** Signature, then the chunks as given. */
export const png = (...chunks: Buffer[]): Buffer => Buffer.concat([PNG_SIGNATURE, ...chunks]);

/** Filter-0 scanlines of interleaved pixels, Adam7-ordered when interlaced. */
export function scanlines(pixels: Uint8Array, width: number, height: number, channels: number, interlace = 0): Buffer {
  const passes = interlace ? ADAM7 : [[0, 0, 1, 1]];
  const rows: Buffer[] = [];
  for (const [x0, y0, dx, dy] of passes) {
    if (x0 >= width || y0 >= height) continue;
    for (let y = y0; y < height; y += dy) {
      const row = [0];
      for (let x = x0; x < width; x += dx)
        for (let c = 0; c < channels; c++) row.push(pixels[(y * width + x) * channels + c]);
      rows.push(Buffer.from(row));
    }
  }
  return Buffer.concat(rows);
}

/** A valid 8-bit PNG of the pixels (RGB or RGBA), optionally interlaced. */
export function rgbPng(pixels: Uint8Array, width: number, height: number, channels: 3 | 4, interlace = 0): Buffer {
  const idat = deflateSync(scanlines(pixels, width, height, channels, interlace));
  return png(
    ihdr({ width, height, colorType: channels === 3 ? 2 : 6, interlace }),
    pngChunk('IDAT', idat),
    pngChunk('IEND'),
  );
}

export function noisePixels(width: number, height: number, channels: number, seed = 1): Uint8Array {
  const out = new Uint8Array(width * height * channels);
  let s = seed;
  for (let i = 0; i < out.length; i++) out[i] = (s = (s * 1103515245 + 12345) >>> 0) >>> 24;
  return out;
}

let zeroBlocks: Buffer | null = null;
const BLOCK_BYTES = 64 << 20;

/** A zlib stream of `bytes` zeros (a multiple of 64 MiB) with a correct Adler-32: 1 GiB takes
 *  about 1 MB. Zero bytes are valid filter-0 scanlines, so the start is a real black image. */
export function zeroStream(bytes: number): Buffer {
  if (bytes % BLOCK_BYTES !== 0) throw new Error('zeroStream takes multiples of 64 MiB');
  // One non-final deflate block run of 64 MiB zeros, ended on a byte boundary by the sync flush,
  // so copies of it can follow each other.
  zeroBlocks ??= deflateRawSync(Buffer.alloc(BLOCK_BYTES), { finishFlush: constants.Z_SYNC_FLUSH });
  const adler = Buffer.alloc(4);
  adler.writeUInt32BE((((bytes % 65521) << 16) | 1) >>> 0);
  const blocks = Array.from({ length: bytes / BLOCK_BYTES }, () => zeroBlocks!);
  return Buffer.concat([Buffer.from([0x78, 0x01]), ...blocks, deflateRawSync(Buffer.alloc(0)), adler]);
}

/** Image data split into IDAT chunks of `size` bytes. */
export function idatChunks(data: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += size) out.push(pngChunk('IDAT', data.subarray(at, at + size)));
  return out;
}

/** The kinds of PNG bomb: a 224x224 RGB header over gigabytes of image data. */
export function bombs(gib = 1): Record<string, Buffer> {
  const zeros = zeroStream(gib * 1024 ** 3);
  const tile = { width: 224, height: 224 };
  const valid = deflateSync(Buffer.alloc(224 * (224 * 3 + 1)));
  return {
    'one IDAT': png(ihdr(tile), pngChunk('IDAT', zeros), pngChunk('IEND')),
    interlaced: png(ihdr({ ...tile, interlace: 1 }), pngChunk('IDAT', zeros), pngChunk('IEND')),
    'many IDATs': png(ihdr(tile), ...idatChunks(zeros, 1024), pngChunk('IEND')),
    'trailing stream': png(ihdr(tile), pngChunk('IDAT', Buffer.concat([valid, zeros])), pngChunk('IEND')),
    'iCCP profile': png(
      ihdr(tile),
      pngChunk('iCCP', Buffer.concat([Buffer.from('icc\0\0', 'latin1'), zeros])),
      pngChunk('IDAT', valid),
      pngChunk('IEND'),
    ),
  };
}
