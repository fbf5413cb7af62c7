// image_data's PNG bytes, decoded once per request. The body parser decodes them straight from
// the body's bytes where it can (plugins/json-body.ts), without ever making the text a string,
// and leaves them here, keyed by the parsed body, whose image_data then holds DECODED_IMAGE; the
// tile checks take them from here, or decode the text of a body parsed the long way.
import { decodeBase64Strict } from '../tile/base64.js';

/** image_data of a parsed body whose bytes are kept here. */
export const DECODED_IMAGE = '(decoded from the request body)';

const decoded = new WeakMap<object, Buffer>();

export function keepImageBytes(body: Record<string, unknown>, bytes: Buffer): void {
  body.image_data = DECODED_IMAGE;
  decoded.set(body, bytes);
}

export function imageBytes(body: { image_data: string }): ReturnType<typeof decodeBase64Strict> {
  const bytes = decoded.get(body);
  return bytes ? { bytes } : decodeBase64Strict(body.image_data);
}
