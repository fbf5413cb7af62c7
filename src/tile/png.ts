// PNG reading for tiles: the header check a front can do before anything inflates, and a decoder
// whose fast path covers what tile pipelines write (8-bit RGB or RGBA, not interlaced) with
// Node's native zlib and one unfiltering pass; every other PNG goes through pngjs.
import { inflateSync } from 'node:zlib';
import { PNG } from 'pngjs';

export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export interface PngHeader {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  interlace: number;
}

/** Reads the IHDR chunk, which the PNG format requires to come first. */
export function readPngHeader(bytes: Uint8Array): PngHeader | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 29 || !b.subarray(0, 8).equals(PNG_SIGNATURE) || b.toString('latin1', 12, 16) !== 'IHDR') return null;
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20), bitDepth: b[24], colorType: b[25], interlace: b[28] };
}

/** Strict base64: Node's decoder skips characters outside the alphabet, so a decoded length that
 *  differs from what the text length implies means the text was not (only) base64. */
export function decodeBase64Strict(text: string): Buffer | null {
  if (text.length % 4 !== 0) return null;
  const bytes = Buffer.from(text, 'base64');
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return bytes.length === (text.length / 4) * 3 - padding ? bytes : null;
}

export interface Pixels {
  width: number;
  height: number;
  /** 3 (RGB) or 4 (RGBA), interleaved, row-major, no padding. */
  channels: 3 | 4;
  data: Uint8Array;
}

/** Decodes a PNG to 8-bit pixels; throws with the reason when the data is not a valid PNG. */
export function decodePng(bytes: Buffer): Pixels {
  const header = readPngHeader(bytes);
  if (header && header.bitDepth === 8 && (header.colorType === 2 || header.colorType === 6) && header.interlace === 0) {
    return decodeFast(bytes, header, header.colorType === 2 ? 3 : 4);
  }
  const png = PNG.sync.read(bytes);
  return { width: png.width, height: png.height, channels: 4, data: png.data };
}

function decodeFast(bytes: Buffer, header: PngHeader, channels: 3 | 4): Pixels {
  const idat: Buffer[] = [];
  for (let pos = 8; pos + 8 <= bytes.length; ) {
    const length = bytes.readUInt32BE(pos);
    const type = bytes.toString('latin1', pos + 4, pos + 8);
    if (pos + 12 + length > bytes.length) throw new Error(`chunk ${type} runs past the end of the file`);
    if (type === 'IDAT') idat.push(bytes.subarray(pos + 8, pos + 8 + length));
    if (type === 'IEND') break;
    pos += 12 + length;
  }
  if (idat.length === 0) throw new Error('no image data (IDAT) chunk');
  const { width, height } = header;
  const stride = width * channels;
  const inflated = inflateSync(idat.length === 1 ? idat[0] : Buffer.concat(idat));
  // A plain Uint8Array view: with Buffer and Uint8Array both in the loops, V8's element loads
  // go polymorphic and unfiltering runs about twice as slow.
  const raw = new Uint8Array(inflated.buffer, inflated.byteOffset, inflated.byteLength);
  if (raw.length < height * (stride + 1)) throw new Error(`image data holds ${raw.length} bytes, ${height * (stride + 1)} expected`);
  const out = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) unfilter(raw, y * (stride + 1), out, y * stride, stride, channels, y > 0);
  return { width, height, channels, data: out };
}

/** Undoes one scanline's filter (PNG spec section 9) from `raw` into `out`. The first pixel and
 *  the first row, which have no left or upper neighbour, are split out so the hot loops have no
 *  branches. */
function unfilter(raw: Uint8Array, at: number, out: Uint8Array, row: number, stride: number, bpp: number, hasPrev: boolean): void {
  const filter = raw[at];
  const src = at + 1;
  const prev = row - stride;
  if (filter === 0 || (filter === 2 && !hasPrev)) {
    out.set(raw.subarray(src, src + stride), row);
  } else if (filter === 1 || ((filter === 3 || filter === 4) && !hasPrev)) {
    // Sub; and Average/Paeth on the first row, where the upper row counts as zeros.
    const halve = filter === 3 ? 1 : 0;
    for (let i = 0; i < bpp; i++) out[row + i] = raw[src + i];
    for (let i = bpp; i < stride; i++) out[row + i] = raw[src + i] + (out[row + i - bpp] >> halve);
  } else if (filter === 2) {
    for (let i = 0; i < stride; i++) out[row + i] = raw[src + i] + out[prev + i];
  } else if (filter === 3 && bpp === 3) {
    // Average, the filter most encoders pick for photographic tiles: the left pixel kept in
    // registers instead of re-read from the output (about 25% faster).
    let r = 0;
    let g = 0;
    let b = 0;
    for (let i = 0; i < stride; i += 3) {
      r = (raw[src + i] + ((r + out[prev + i]) >> 1)) & 255;
      g = (raw[src + i + 1] + ((g + out[prev + i + 1]) >> 1)) & 255;
      b = (raw[src + i + 2] + ((b + out[prev + i + 2]) >> 1)) & 255;
      out[row + i] = r;
      out[row + i + 1] = g;
      out[row + i + 2] = b;
    }
  } else if (filter === 3) {
    for (let i = 0; i < bpp; i++) out[row + i] = raw[src + i] + (out[prev + i] >> 1);
    for (let i = bpp; i < stride; i++) out[row + i] = raw[src + i] + ((out[row + i - bpp] + out[prev + i]) >> 1);
  } else if (filter === 4) {
    for (let i = 0; i < bpp; i++) out[row + i] = raw[src + i] + out[prev + i];
    for (let i = bpp; i < stride; i++) {
      const a = out[row + i - bpp];
      const b = out[prev + i];
      const c = out[prev + i - bpp];
      const pa = b > c ? b - c : c - b;
      const pb = a > c ? a - c : c - a;
      const pc = a + b - c - c > 0 ? a + b - c - c : c + c - a - b;
      out[row + i] = raw[src + i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
    }
  } else {
    throw new Error(`unknown scanline filter ${filter} in row ${row / stride}`);
  }
}
