// PNG writing: chunks (pngChunk, IEND; the decoder's stored rewrap in png.ts uses IEND too), and
// for the client side an 8-bit RGB image as one IDAT of filter-0 scanlines. Deflate level 0
// (stored blocks) by default: on a 224x224 slide tile it costs ~0.3 CPU-ms where libvips at
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
/** The filtered scanlines, reused: deflateSync is done with them before encodeRgbPng returns. */
let scratch = Buffer.alloc(0);

/** PNG of interleaved 8-bit RGB pixels; `level` is zlib's (0 stored, 1 fastest ... 9). */
export function encodeRgbPng(rgb: Uint8Array, width: number, height: number, level = 0): Buffer {
  const stride = width * 3;
  if (scratch.length < (stride + 1) * height) scratch = Buffer.allocUnsafe((stride + 1) * height);
  const scanlines = scratch.subarray(0, (stride + 1) * height);
  for (let y = 0; y < height; y++) {
    scanlines[y * (stride + 1)] = 0; // filter type none
    scanlines.set(rgb.subarray(y * stride, (y + 1) * stride), y * (stride + 1) + 1);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type RGB; compression, filter and interlace methods 0
  return Buffer.concat([PNG_SIGNATURE, pngChunk('IHDR', ihdr), pngChunk('IDAT', deflateSync(scanlines, { level })), IEND]);
}
