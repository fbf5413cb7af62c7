// PNG tiles to pixels, off the JS thread. Every PNG first passes the rules of png-rules.ts, whose
// bounded, exact inflate (Node's zlib, on the libuv pool) is the one inflate of its image data.
// The scanlines it returns go to the decoder again wrapped as stored (uncompressed) deflate
// blocks, so the decoder's own inflate is a copy and what it adds is unfiltering: @napi-rs/image
// on the libuv pool for 8-bit RGB and RGBA (what tile pipelines write; interlaced or not), pngjs
// for the rare other layouts (greyscale, palette, 16-bit). The comparison that chose this is in
// docs/throughput.md ("PNG decoders compared").
import { Transformer } from '@napi-rs/image';
import { PNG } from 'pngjs';
import { crc32 } from 'node:zlib';
import { inflateImageData, PNG_SIGNATURE, readPngLayout, type PngHeader, type PngLayout } from './png-rules.js';
import { IEND } from './png-write.js';

export interface Pixels {
  width: number;
  height: number;
  /** 3 (RGB) or 4 (RGBA), interleaved, row-major, no padding. */
  channels: 3 | 4;
  data: Uint8Array;
}

/** Decodes a PNG to 8-bit pixels; rejects with a PngError naming the broken rule, or with the
 *  decoder's reason. */
export async function decodePng(bytes: Buffer): Promise<Pixels> {
  const layout = readPngLayout(bytes);
  const { header } = layout;
  const stored = storedPng(layout, await inflateImageData(layout));
  if (header.bitDepth === 8 && (header.colorType === 2 || header.colorType === 6)) {
    const data = await new Transformer(stored).rawPixels();
    return { width: header.width, height: header.height, channels: channelsOf(data, header), data };
  }
  const png = PNG.sync.read(stored);
  return { width: png.width, height: png.height, channels: 4, data: png.data };
}

/** Largest stored deflate block (RFC 1951 3.2.4: LEN is 16 bits). */
const STORED_BLOCK = 0xffff;

/** The PNG again, its ancillary chunks left out and its image data the given scanlines in stored
 *  deflate blocks, with the Adler-32 of the original stream: the inflate has verified that it is
 *  the scanlines' own. */
function storedPng({ headChunks, imageData }: PngLayout, scanlines: Buffer): Buffer {
  const blocks = Math.max(1, Math.ceil(scanlines.length / STORED_BLOCK));
  const idatLength = 2 + blocks * 5 + scanlines.length + 4;
  const head = headChunks.reduce((sum, c) => sum + c.length, PNG_SIGNATURE.length);
  const out = Buffer.allocUnsafe(head + 12 + idatLength + IEND.length);
  let pos = 0;
  for (const part of [PNG_SIGNATURE, ...headChunks]) pos += part.copy(out, pos);
  const idat = pos;
  pos = out.writeUInt32BE(idatLength, pos);
  pos += out.write('IDAT', pos, 'latin1');
  out[pos++] = 0x78; // zlib header: deflate, 32 KiB window, no dictionary
  out[pos++] = 0x01;
  for (let b = 0; b < blocks; b++) {
    const from = b * STORED_BLOCK;
    const length = Math.min(STORED_BLOCK, scanlines.length - from);
    out[pos++] = b === blocks - 1 ? 1 : 0;
    pos = out.writeUInt16LE(length, pos);
    pos = out.writeUInt16LE(~length & 0xffff, pos);
    pos += scanlines.copy(out, pos, from, from + length);
  }
  pos += imageData.copy(out, pos, imageData.length - 4);
  pos = out.writeUInt32BE(crc32(out.subarray(idat + 4, pos)), pos);
  IEND.copy(out, pos);
  return out;
}

/** RGB, or RGBA (also for RGB with a tRNS chunk, which the decoder expands to alpha). */
function channelsOf(data: Uint8Array, header: PngHeader): 3 | 4 {
  const channels = data.length / (header.width * header.height);
  if (channels !== 3 && channels !== 4)
    throw new Error(`decoder returned ${data.length} bytes for ${header.width}x${header.height} pixels`);
  return channels;
}
