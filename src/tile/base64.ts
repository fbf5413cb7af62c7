// Strict standard base64 (RFC 4648 section 4) for image_data. Node's decoder skips characters
// outside the alphabet and also takes the URL-safe one (- and _); both are refused here, and the
// reason names the alphabet expected.

export const BASE64_ALPHABET = 'standard base64 (A-Z a-z 0-9 + /, padded with = to a multiple of 4)';

/** Text decoded per slice of this many characters (a multiple of 4): short strings stay out of
 *  V8's large-object space, where each string of a tile's size costs a fresh mapping. */
const SLICE = 32768;

/** The bytes, or the reason the text (a string, or its ASCII bytes) is not strict standard base64. */
export function decodeBase64Strict(text: string | Buffer): { bytes: Buffer } | { reason: string } {
  if (text.includes('-') || text.includes('_')) {
    return {
      reason: `image_data uses the URL-safe base64 alphabet (- and _), which is refused; expected ${BASE64_ALPHABET}`,
    };
  }
  if (text.length % 4 !== 0)
    return { reason: `image_data has ${text.length} characters, not a multiple of 4; expected ${BASE64_ALPHABET}` };
  const tail = typeof text === 'string' ? text.slice(-2) : text.toString('latin1', Math.max(0, text.length - 2));
  const padding = tail.endsWith('==') ? 2 : tail.endsWith('=') ? 1 : 0;
  const length = (text.length / 4) * 3 - padding;
  const bytes = typeof text === 'string' ? Buffer.from(text, 'base64') : decodeSlices(text, length);
  // A decoded length other than the text length implies means characters were skipped.
  if (bytes.length !== length) return { reason: `image_data holds characters outside ${BASE64_ALPHABET}` };
  return { bytes };
}

/** The text's `length` bytes (fewer where it holds characters outside the alphabet), in a buffer
 *  of their own once sent to a worker: the front frees it when the tile is answered. */
function decodeSlices(text: Buffer, length: number): Buffer {
  const out = Buffer.allocUnsafe(length);
  let written = 0;
  for (let at = 0; at < text.length; at += SLICE)
    written += out.write(text.toString('latin1', at, Math.min(text.length, at + SLICE)), written, 'base64');
  return out.subarray(0, written);
}
