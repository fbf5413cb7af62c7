// The one set of PNG rules every tile passes before any decoder sees it (PNG spec, 3rd edition):
// the chunk structure with every CRC, the IHDR fields, the chunk order, and image data that
// inflates to exactly the bytes the declared dimensions need. Each failure is a PngError naming
// what is wrong, with the rule's code; nothing here inflates more than those bytes (plus one zlib
// output chunk).
import { kMaxLength } from 'node:buffer';
import { crc32, inflate, type ZlibOptions } from 'node:zlib';
import { CodedError, type CodesOf } from '../lib/errors.js';

export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

type PngCode = CodesOf<'PNG'>;
type RuleOf<C> = C extends `TILE_ERR_PNG_${infer Rule}` ? Lowercase<Rule> : never;
/** The rules, listed once with their meaning in src/lib/errors.ts: TILE_ERR_PNG_CRC is 'crc'. */
export type PngRule = RuleOf<PngCode>;

export class PngError extends CodedError<PngCode> {
  override name = 'PngError';
  constructor(
    readonly rule: PngRule,
    message: string,
  ) {
    super(`TILE_ERR_PNG_${rule.toUpperCase()}` as PngCode, message);
  }
}

export interface PngHeader {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  interlace: number;
}

/** Bit depths each colour type allows (PNG spec table 11.1). */
const BIT_DEPTHS: Record<number, number[]> = {
  0: [1, 2, 4, 8, 16],
  2: [8, 16],
  3: [1, 2, 4, 8],
  4: [8, 16],
  6: [8, 16],
};
const SAMPLES: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
const MAX_DIMENSION = 2 ** 31 - 1;
/** The critical chunks the format defines; any other critical chunk is refused. */
const CRITICAL_CHUNKS = new Set(['IHDR', 'PLTE', 'IDAT', 'IEND']);
/** Chunks before the image data that a decoder needs for the pixels; every other (ancillary)
 *  chunk is left out of what the decoder sees, so a compressed iCCP or zTXt cannot be inflated
 *  behind our back. */
const HEAD_CHUNKS = new Set(['IHDR', 'PLTE', 'tRNS']);

const fail = (rule: PngRule, message: string): never => {
  throw new PngError(rule, message);
};

/** Checks the signature and the IHDR chunk (which must come first) and returns its fields. */
export function readPngHeader(bytes: Uint8Array): PngHeader {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 8 || !b.subarray(0, 8).equals(PNG_SIGNATURE)) fail('signature', 'PNG signature not found');
  if (b.length < 33 || b.toString('latin1', 12, 16) !== 'IHDR') fail('ihdr', 'the first chunk is not IHDR');
  if (b.readUInt32BE(8) !== 13) fail('ihdr', `IHDR holds ${b.readUInt32BE(8)} bytes, 13 expected`);
  checkCrc(b, 8, 'IHDR', 13);
  const header = {
    width: b.readUInt32BE(16),
    height: b.readUInt32BE(20),
    bitDepth: b[24],
    colorType: b[25],
    interlace: b[28],
  };
  for (const side of ['width', 'height'] as const) {
    if (header[side] < 1 || header[side] > MAX_DIMENSION)
      fail('ihdr', `IHDR ${side} is ${header[side]}, expected 1 to ${MAX_DIMENSION}`);
  }
  const depths = BIT_DEPTHS[header.colorType];
  if (!depths) fail('ihdr', `IHDR colour type is ${header.colorType}, expected 0, 2, 3, 4 or 6`);
  if (!depths.includes(header.bitDepth))
    fail(
      'ihdr',
      `IHDR bit depth ${header.bitDepth} is not allowed with colour type ${header.colorType} (allowed: ${depths.join(', ')})`,
    );
  if (b[26] !== 0) fail('ihdr', `IHDR compression method is ${b[26]}, expected 0 (deflate)`);
  if (b[27] !== 0) fail('ihdr', `IHDR filter method is ${b[27]}, expected 0`);
  if (header.interlace > 1)
    fail('ihdr', `IHDR interlace method is ${header.interlace}, expected 0 (none) or 1 (Adam7)`);
  return header;
}

function checkCrc(b: Buffer, at: number, type: string, length: number): void {
  const stored = b.readUInt32BE(at + 8 + length);
  const computed = crc32(b.subarray(at + 4, at + 8 + length));
  if (stored !== computed)
    fail('crc', `chunk ${type} at byte ${at} has a bad CRC (stored 0x${hex(stored)}, computed 0x${hex(computed)})`);
}

const hex = (n: number): string => n.toString(16).padStart(8, '0');

export interface PngLayout {
  header: PngHeader;
  /** The zlib stream: every IDAT's data, in order. */
  imageData: Buffer;
  /** The chunks before the image data that a decoder needs for pixels (IHDR, PLTE, tRNS), whole;
   *  every other (ancillary) chunk is left out. */
  headChunks: Buffer[];
}

/** Walks every chunk and applies the structural rules. */
export function readPngLayout(bytes: Buffer): PngLayout {
  const header = readPngHeader(bytes);
  const idat: Buffer[] = [];
  const headChunks: Buffer[] = [];
  let idatEnded = false;
  let plte = false;
  let pos = 8;
  for (;;) {
    if (pos === bytes.length) fail('no_iend', `the file ends at byte ${pos} without an IEND chunk`);
    if (pos + 12 > bytes.length)
      fail('chunk_bounds', `the file ends at byte ${bytes.length} inside the chunk that starts at byte ${pos}`);
    const length = bytes.readUInt32BE(pos);
    const type = bytes.toString('latin1', pos + 4, pos + 8);
    if (!/^[A-Za-z]{4}$/.test(type))
      fail('chunk_type', `chunk at byte ${pos} has type ${JSON.stringify(type)}, expected 4 ASCII letters`);
    if (length > MAX_DIMENSION || pos + 12 + length > bytes.length) {
      fail(
        'chunk_bounds',
        `chunk ${type} at byte ${pos} declares ${length} bytes of data, only ${Math.max(0, bytes.length - pos - 12)} are left in the file`,
      );
    }
    checkCrc(bytes, pos, type, length);
    const data = bytes.subarray(pos + 8, pos + 8 + length);
    if (type === 'IHDR' && pos !== 8) fail('second_ihdr', `a second IHDR chunk at byte ${pos}`);
    if (type === 'IDAT') {
      if (idatEnded)
        fail(
          'idat_order',
          `IDAT chunk at byte ${pos} after other chunks that followed the image data; IDAT chunks must be consecutive`,
        );
      idat.push(data);
    } else if (idat.length > 0) {
      idatEnded = true;
    }
    if (type === 'PLTE') checkPalette(header, length, pos, plte, idat.length > 0);
    // The decoder is given only the chunks before the image data: a late tRNS would be dropped.
    if (type === 'tRNS' && idat.length > 0)
      fail('trns', `tRNS chunk at byte ${pos} after the image data; it must come before the first IDAT`);
    plte ||= type === 'PLTE';
    if (type === 'IEND') {
      if (length !== 0) fail('no_iend', `IEND chunk at byte ${pos} holds ${length} bytes, expected none`);
      if (pos + 12 !== bytes.length) fail('after_iend', `${bytes.length - pos - 12} bytes after the IEND chunk`);
    }
    const critical = type.charCodeAt(0) < 0x61;
    if (critical && !CRITICAL_CHUNKS.has(type))
      fail('unknown_critical_chunk', `unknown critical chunk ${type} at byte ${pos} (known: IHDR, PLTE, IDAT, IEND)`);
    // IHDR is first, and PLTE and tRNS after the image data were refused above.
    if (HEAD_CHUNKS.has(type)) headChunks.push(bytes.subarray(pos, pos + 12 + length));
    if (type === 'IEND') break;
    pos += 12 + length;
  }
  if (idat.length === 0) fail('no_idat', 'no image data (IDAT) chunk');
  if (header.colorType === 3 && !plte) fail('plte', 'colour type 3 (palette) without a PLTE chunk');
  return { header, imageData: idat.length === 1 ? idat[0] : Buffer.concat(idat), headChunks };
}

function checkPalette(header: PngHeader, length: number, pos: number, seen: boolean, afterIdat: boolean): void {
  if (seen) fail('plte', `a second PLTE chunk at byte ${pos}`);
  if (afterIdat) fail('plte', `PLTE chunk at byte ${pos} after the image data`);
  if (header.colorType === 0 || header.colorType === 4)
    fail('plte', `PLTE chunk in a colour type ${header.colorType} (greyscale) PNG`);
  const entries = length / 3;
  const most = header.colorType === 3 ? 2 ** header.bitDepth : 256;
  if (!Number.isInteger(entries) || entries < 1 || entries > most)
    fail('plte', `PLTE holds ${length} bytes, expected 3 per entry and 1 to ${most} entries`);
}

/** Adam7 passes: first column, first row, column step, row step (PNG spec 8.2). */
export const ADAM7 = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
];

/** Bytes the filtered scanlines of the declared image take: what the zlib stream must inflate to. */
export function imageDataBytes(header: PngHeader): number {
  const bitsPerPixel = SAMPLES[header.colorType] * header.bitDepth;
  const scanlines = (width: number, rows: number) =>
    width && rows ? rows * (1 + Math.ceil((width * bitsPerPixel) / 8)) : 0;
  if (header.interlace === 0) return scanlines(header.width, header.height);
  return ADAM7.reduce(
    (sum, [x0, y0, dx, dy]) =>
      sum + scanlines(Math.ceil((header.width - x0) / dx), Math.ceil((header.height - y0) / dy)),
    0,
  );
}

type InflateInfo = { buffer: Buffer; engine: { bytesWritten: number } };
const inflateWithInfo = (data: Buffer, options: ZlibOptions & { info: true }) =>
  new Promise<InflateInfo>((resolve, reject) =>
    inflate(data, options, (err, result) => (err ? reject(err) : resolve(result as unknown as InflateInfo))),
  );

/** Inflates the image data on the libuv pool, stopping past the bytes the header declares, checks
 *  that the zlib stream holds exactly those bytes and ends where the IDAT data ends (zlib checks
 *  its Adler-32), and returns them: the filtered scanlines. */
export async function inflateImageData(layout: PngLayout): Promise<Buffer> {
  const { header, imageData } = layout;
  const expected = imageDataBytes(header);
  const size = `${header.width}x${header.height}${header.interlace ? ' interlaced' : ''}`;
  if (expected > kMaxLength)
    fail(
      'excess_image_data',
      `a ${size} PNG needs ${expected} bytes of image data, more than a buffer holds (${kMaxLength})`,
    );
  let result: InflateInfo;
  try {
    // One output chunk for a valid stream (no concatenation); a bomb stops after that chunk.
    result = await inflateWithInfo(imageData, {
      maxOutputLength: expected,
      chunkSize: Math.max(64, Math.min(expected + 1, 1 << 24)),
      info: true,
    });
  } catch (err) {
    const { code, message } = err as NodeJS.ErrnoException;
    if (code === 'ERR_BUFFER_TOO_LARGE')
      fail(
        'excess_image_data',
        `image data inflates to more than the ${expected} bytes a ${size} PNG needs; refused after ${expected} bytes`,
      );
    if (code === 'Z_BUF_ERROR')
      fail('short_image_data', `the zlib stream of the image data is truncated (${imageData.length} compressed bytes)`);
    fail('zlib', `the image data is not a valid zlib stream: ${message}`);
  }
  const inflated = result!.buffer.length;
  if (inflated < expected)
    fail('short_image_data', `image data inflates to ${inflated} bytes, a ${size} PNG needs ${expected}`);
  const trailing = imageData.length - result!.engine.bytesWritten;
  if (trailing > 0) fail('trailing_image_data', `${trailing} bytes of trailing data after the zlib stream in IDAT`);
  return result!.buffer;
}
