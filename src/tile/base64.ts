// Strict standard base64 (RFC 4648 section 4) for image_data. Node's decoder skips characters
// outside the alphabet and also takes the URL-safe one (- and _); both are refused here, and the
// reason names the alphabet expected.

export const BASE64_ALPHABET = 'standard base64 (A-Z a-z 0-9 + /, padded with = to a multiple of 4)';

/** The bytes, or the reason the text is not strict standard base64. */
export function decodeBase64Strict(text: string): { bytes: Buffer } | { reason: string } {
  if (text.includes('-') || text.includes('_')) {
    return { reason: `image_data uses the URL-safe base64 alphabet (- and _), which is refused; expected ${BASE64_ALPHABET}` };
  }
  if (text.length % 4 !== 0) return { reason: `image_data has ${text.length} characters, not a multiple of 4; expected ${BASE64_ALPHABET}` };
  const bytes = Buffer.from(text, 'base64');
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  // A decoded length other than the text length implies means characters were skipped.
  if (bytes.length !== (text.length / 4) * 3 - padding) return { reason: `image_data holds characters outside ${BASE64_ALPHABET}` };
  return { bytes };
}
