// The one place a tile's pixels become a request body, made ahead of the posting (in tile-infer's
// reader threads): raw RGB pixels for servers that take them, the fields then in the query; else
// the contract's JSON, a PNG in stored deflate blocks (cheap to write, a copy to inflate) in base64.
import type { TileBodyType } from '../contract/endpoints.js';
import type { TileFields } from '../contract/schemas.js';
import { encodeRgbRows } from '../tile/png-write.js';
import { base64Length, writeBase64 } from './base64.js';
import type { RowWriter } from './slide/region.js';

/** A tile request's body as bytes, and the fields a binary body sends in the query. */
export interface MadeBody {
  type: TileBodyType;
  bytes: Buffer;
  fields: TileFields;
}

/** The JSON body of a tile request as bytes, the PNG's base64 written straight into it: the same
 *  JSON as JSON.stringify of the request with image_data first, with no ~200 KB string made,
 *  scanned for escapes and encoded again on the way to the socket. Written into `into` when it is
 *  large enough (a body buffer used before), else into a new buffer. */
export function tileRequestBody(png: Uint8Array, fields: TileFields, into?: ArrayBuffer): Buffer {
  const head = '{"image_data":"';
  const rest = JSON.stringify(fields);
  const tail = rest === '{}' ? '"}' : `",${rest.slice(1)}`;
  const at = head.length + base64Length(png.length);
  const length = at + Buffer.byteLength(tail);
  const body = bufferOf(length, into);
  body.write(head, 0, 'latin1');
  writeBase64(png, body, head.length);
  body.write(tail, at, 'utf8');
  return body;
}

/** A binary body's fields as query parameters: the JSON body's names, lists comma-separated. */
export function tileQuery(fields: TileFields): string {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(fields))
    if (value !== null && value !== undefined) query.set(key, Array.isArray(value) ? value.join(',') : String(value));
  return query.toString();
}

/** An endpoint path with a binary body's query added (after the path's own, such as `?mode=`). */
export const withQuery = (path: string, query: string): string => `${path}${path.includes('?') ? '&' : '?'}${query}`;

/** The body of a size x size tile whose RGB rows `rows` writes: raw pixels, or the JSON body with
 *  the rows written straight into the PNG's scanlines (either way the pixels are copied once,
 *  from the decoded slide). */
export function tileBody(
  type: 'application/json' | 'application/octet-stream',
  size: number,
  rows: RowWriter,
  fields: TileFields,
  into?: ArrayBuffer,
): Buffer {
  if (type === 'application/json') return tileRequestBody(encodeRgbRows(size, size, rows), fields, into);
  const body = bufferOf(size * size * 3, into);
  for (let y = 0; y < size; y++) rows(y, body, y * size * 3);
  return body;
}

/** A body buffer at the start of an ArrayBuffer of its own, which a reader thread may transfer:
 *  never a slice of Node's pool (bodies under 4 KiB), which from Node 22 cannot be transferred. */
const bufferOf = (length: number, into?: ArrayBuffer): Buffer =>
  into && into.byteLength >= length ? Buffer.from(into, 0, length) : Buffer.allocUnsafeSlow(length);
