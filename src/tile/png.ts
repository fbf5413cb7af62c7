// PNG facts a tile check needs before (or instead of) inflating the image.
export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export interface PngHeader {
  width: number;
  height: number;
}

/** Reads width and height from the IHDR chunk, which the PNG format requires to come first. */
export function readPngHeader(bytes: Buffer): PngHeader | null {
  if (bytes.length < 24 || !bytes.subarray(0, 8).equals(PNG_SIGNATURE)) return null;
  if (bytes.toString('latin1', 12, 16) !== 'IHDR') return null;
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

/** The header from the first 32 base64 characters (24 bytes), without decoding the rest. */
export function readPngHeaderBase64(base64: string): PngHeader | null {
  return readPngHeader(Buffer.from(base64.slice(0, 32), 'base64'));
}

/** Strict base64: Node's decoder skips characters outside the alphabet, so a decoded length that
 *  differs from what the text length implies means the text was not (only) base64. */
export function decodeBase64Strict(text: string): Buffer | null {
  if (text.length % 4 !== 0) return null;
  const bytes = Buffer.from(text, 'base64');
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return bytes.length === (text.length / 4) * 3 - padding ? bytes : null;
}
