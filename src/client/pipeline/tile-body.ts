// The one place a tile's pixels become a request body: today a PNG in stored deflate blocks (cheap
// to write, a copy to inflate), base64 in the JSON body. Another body type plugs in here.
import type { TileRequest } from '../../contract/schemas.js';
import { encodeRgbRows } from '../../tile/png-write.js';
import { base64Length, writeBase64 } from '../base64.js';
import type { RowWriter } from '../slide/region.js';

/** Every field of a tile request but the image. */
export type TileFields = Omit<TileRequest, 'image_data'>;

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
  const body = into && into.byteLength >= length ? Buffer.from(into, 0, length) : Buffer.allocUnsafe(length);
  body.write(head, 0, 'latin1');
  writeBase64(png, body, head.length);
  body.write(tail, at, 'utf8');
  return body;
}

/** The body of a size x size tile whose RGB rows `rows` writes (straight into the PNG's
 *  scanlines: the pixels are copied once, from the decoded slide). */
export function tileBody(size: number, rows: RowWriter, fields: TileFields, into?: ArrayBuffer): Buffer {
  return tileRequestBody(encodeRgbRows(size, size, rows), fields, into);
}
