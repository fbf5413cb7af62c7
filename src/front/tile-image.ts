// The tile's image as the body parsers read it, carried in the parsed body's image_data, as
// @fastify/multipart's attachFieldsToBody carries a file in the body's fields: the PNG's bytes
// (base64-decoded from a JSON body's image_data, or an image/png body), the raw RGB pixels (an
// application/octet-stream body), or why image_data's text is not strict base64 (refused with
// the tile checks, as before). A JSON image_data that is not a string is left as sent, and a
// missing one stays missing: the route's schema (TileBody) then reports it as the contract's
// schema does, in the same place among the other fields' errors.
import type { Plugin } from 'ajv';
import { Type, type Static } from 'typebox';
import { TileRequest } from '../contract/schemas.js';

/** JSON cannot make a symbol key: no body can pass for a carrier. */
const CARRIER: unique symbol = Symbol('TileImage');

/** Where the image was: a JSON body's image_data, or the body itself (its fields then come in the
 *  query string). */
export type ImageSource = 'image_data' | 'body';

export type TileImage = { readonly [CARRIER]: true } & (
  | { format: 'png'; bytes: Buffer; from: ImageSource }
  | { format: 'rgb'; bytes: Buffer; from: 'body' }
  | { format: 'not-base64'; reason: string; from: 'image_data' }
);

export const pngImage = (bytes: Buffer, from: ImageSource): TileImage => ({
  [CARRIER]: true,
  format: 'png',
  bytes,
  from,
});
export const rgbImage = (bytes: Buffer): TileImage => ({ [CARRIER]: true, format: 'rgb', bytes, from: 'body' });
export const notBase64 = (reason: string): TileImage => ({
  [CARRIER]: true,
  format: 'not-base64',
  reason,
  from: 'image_data',
});

export function isTileImage(value: unknown): value is TileImage {
  return typeof value === 'object' && value !== null && CARRIER in value;
}

/** The loc of the image in the request, for its errors. */
export const imageLoc = (image: TileImage): string[] => (image.from === 'body' ? ['body'] : ['body', 'image_data']);

/** Where a parsed body's tile fields were sent: in the JSON body, or in the query beside a
 *  binary body. */
export function fieldsLocation(body: unknown): 'body' | 'query' {
  const image = typeof body === 'object' && body !== null ? (body as { image_data?: unknown }).image_data : undefined;
  return isTileImage(image) && image.from === 'body' ? 'query' : 'body';
}

/** The ajv keyword `tileImage`: the value is a carrier (an ajv plugin of the front's, app.ts). */
export const tileImageKeyword: Plugin<unknown> = (ajv) =>
  ajv.addKeyword({
    keyword: 'tileImage',
    schemaType: 'boolean',
    errors: false,
    validate: (_schema: boolean, value: unknown) => isTileImage(value),
  });

/** The contract's TileRequest as the parsers hand it to the route: image_data holds the carrier,
 *  in its place among the fields (ajv reports missing fields first, then each field in order). */
export const TileBody = Type.Object(
  { ...TileRequest.properties, image_data: Type.Unsafe<TileImage>({ tileImage: true }) },
  { title: 'ModelRequest' },
);
export type TileBody = Static<typeof TileBody>;
