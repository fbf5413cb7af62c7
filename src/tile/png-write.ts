// PNG writing: chunks (pngChunk, IEND; the decoder's stored rewrap in png.ts uses IEND too), and
// for the client side an 8-bit RGB image as one IDAT of filter-0 scanlines. Deflate level 0
// (stored blocks) by default: on a 224x224 slide tile it costs ~0.2 CPU-ms where libvips at
// level 1 took ~2.8 (and Node's zlib at level 1 ~3.6), and the service's inflate of it is
// copy-speed (~0.1 ms instead of ~1); the body is ~1.5x larger (201 KB of base64 instead of
// ~133 KB), which loopback and LAN links carry without notice. Deterministic: the same pixels
// give the same bytes.
import { crc32, deflateSync } from 'node:zlib';
import { PNG_SIGNATURE } from './png-rules.js';

/** One chunk: length, type, data, CRC (or the CRC given, for tests that forge bad ones). */
export function pngChunk(type: string, data: Buffer = Buffer.alloc(0), crc?: number): Buffer {
  const b = Buffer.alloc(12 + data.length);
  b.writeUInt32BE(data.length, 0);
  b.write(type, 4, 'latin1');
  data.copy(b, 8);
  b.writeUInt32BE(crc ?? crc32(b.subarray(4, 8 + data.length)), 8 + data.length);
  return b;
}

/** The IEND chunk, the same in every PNG. */
export const IEND = pngChunk('IEND');
/** Largest stored deflate block (RFC 1951 3.2.4: LEN is 16 bits). */
const STORED_BLOCK = 0xffff;
/** The PNG being written (stored) or the scanlines being deflated, reused from call to call. */
let scratch = Buffer.alloc(0);
let lines = Buffer.alloc(0);

/** PNG of 8-bit RGB pixels whose rows `rows(y, out, at)` writes (width * 3 bytes at `at`).
 *  Level 0 (the default) writes the rows straight into stored deflate blocks of whole scanlines
 *  with their Adler-32 (no zlib call, no copy of the image data) and returns a view of a reused
 *  buffer, valid until the next call; other levels are zlib's (1 fastest ... 9). */
export function encodeRgbRows(
  width: number,
  height: number,
  rows: (y: number, out: Uint8Array, at: number) => void,
  level = 0,
): Buffer {
  const stride = width * 3 + 1;
  const perBlock = Math.floor(STORED_BLOCK / stride);
  let zlib: Buffer | null = null;
  if (level > 0 || perBlock === 0) {
    if (lines.length < stride * height) lines = Buffer.allocUnsafe(stride * height);
    for (let y = 0; y < height; y++) {
      lines[y * stride] = 0; // filter type none
      rows(y, lines, y * stride + 1);
    }
    zlib = deflateSync(lines.subarray(0, stride * height), { level });
  }
  const blocks = Math.ceil(height / perBlock);
  const zlibLength = zlib ? zlib.length : 2 + blocks * 5 + stride * height + 4;
  const total = PNG_SIGNATURE.length + 25 + 8 + zlibLength + 4 + IEND.length;
  if (scratch.length < total) scratch = Buffer.allocUnsafe(total);
  const out = scratch;
  let pos = PNG_SIGNATURE.copy(out, 0);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type RGB; compression, filter and interlace methods 0
  pos += pngChunk('IHDR', ihdr).copy(out, pos);
  pos = out.writeUInt32BE(zlibLength, pos);
  const idat = pos;
  pos += out.write('IDAT', pos, 'latin1');
  if (zlib) pos += zlib.copy(out, pos);
  else {
    out[pos++] = 0x78; // zlib header: deflate, 32 KiB window, no dictionary
    out[pos++] = 0x01;
    let a = 1;
    let b = 0;
    for (let y = 0; y < height; y++) {
      if (y % perBlock === 0) {
        const length = Math.min(perBlock, height - y) * stride;
        out[pos++] = y + perBlock >= height ? 1 : 0;
        pos = out.writeUInt16LE(length, pos);
        pos = out.writeUInt16LE(~length & 0xffff, pos);
      }
      out[pos] = 0; // filter type none
      rows(y, out, pos + 1);
      // Adler-32 of the scanline, its sums reduced once a row (exact in doubles for any row
      // that fits a block).
      for (let i = pos, end = pos + stride; i < end; i++) {
        a += out[i];
        b += a;
      }
      a %= 65521;
      b %= 65521;
      pos += stride;
    }
    pos = out.writeUInt32BE(((b << 16) | a) >>> 0, pos);
  }
  pos = out.writeUInt32BE(crc32(out.subarray(idat, pos)), pos);
  pos += IEND.copy(out, pos);
  return out.subarray(0, pos);
}

/** PNG of interleaved 8-bit RGB pixels; `level` is zlib's (0 stored, 1 fastest ... 9). */
export function encodeRgbPng(rgb: Uint8Array, width: number, height: number, level = 0): Buffer {
  const row = width * 3;
  return Buffer.from(
    encodeRgbRows(width, height, (y, out, at) => out.set(rgb.subarray(y * row, (y + 1) * row), at), level),
  );
}
