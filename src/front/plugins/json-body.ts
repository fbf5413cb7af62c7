// The JSON body parser. fastify's default (secure-json-parse) runs two regular expressions over
// the whole text of every body to find "__proto__" and "constructor": on a tile, hundreds of
// kilobytes of base64, that was the largest single cost in a front's profile (11% of its CPU).
// A tile request is a flat object whose fields the schema names, so the same protection is
// dropping those two keys from the top level, whatever the text's size.
// A tile body is nearly all image_data, so that field is found and base64-decoded in the bytes,
// and only the rest is decoded as text and parsed; either way a string image_data leaves the
// parser as the decoded image (tile-image.ts).
// JSON.parse of a body nested millions of levels deep holds the event loop for seconds (6 MB,
// 3 million levels: 2.3 s), so nesting is counted in the bytes first and a body deeper than
// MAX_JSON_DEPTH is refused as malformed JSON (422 json_invalid at its position), as a body over
// the limit is refused by its size. So is a body of more values than its route takes (a tile
// request: its fields and bulk_rna): 4 MB of bulk_rna took a front 0.9 s (2 million numbers:
// JSON.parse) to 5.8 s (a million strings: a schema error each) to refuse, and 300,000 fields
// 2.3x a flat body of the same size.
import { isAscii } from 'node:buffer';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../../lib/errors.js';
import { decodeBase64Strict } from '../../tile/base64.js';
import { notBase64, pngImage, type TileImage } from '../tile-image.js';

const FORBIDDEN = ['__proto__', 'constructor'];
const KEY = Buffer.from('"image_data"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** Stands in for image_data's value while the rest is parsed, to find out whether the key found
 *  in the bytes is the top-level one; random, so no body can hold it. It never leaves the parser. */
const MARKER = `image_data ${randomBytes(16).toString('hex')}`;

/** How deep a body may nest: a tile request nests 2 levels (the object, bulk_rna); fields the
 *  contract does not name get room up to this (and EXTRA_VALUES values, tile-checks.ts). */
export const MAX_JSON_DEPTH = 16;

/** What each byte is to scanJson; most (digits, letters, spaces) are nothing (0). One table read
 *  and one test pass them over: a v2 body of 150,528 numbers (537 KB) took 1.75 ms against 2.6
 *  comparing each byte to the seven, 1.28 against 1.45 once V8 has optimized both. */
enum Byte {
  Quote = 1,
  Backslash,
  Comma,
  Open,
  Close,
}
const BYTES = new Uint8Array(256);
BYTES[QUOTE] = Byte.Quote;
BYTES[BACKSLASH] = Byte.Backslash;
BYTES[0x2c] = Byte.Comma;
for (const c of '{[') BYTES[c.charCodeAt(0)] = Byte.Open;
for (const c of '}]') BYTES[c.charCodeAt(0)] = Byte.Close;

/** How many values a request's body may hold on its route, and what the route takes (said in the
 *  refusal). */
export interface ValueLimit {
  values: number;
  expected: string;
}

/** Throws where `body` nests deeper than MAX_JSON_DEPTH, as JSON.parse throws on malformed text;
 *  returns about how many values it holds (the commas between them). `skip`, a string's contents
 *  already read (no quote or backslash in it), is not scanned. */
export function scanJson(body: Buffer, [from, to]: [number, number] = [body.length, body.length]): number {
  let depth = 0;
  let values = 0;
  let inString = false;
  const end = body.length;
  for (let at = 0; at < end; at++) {
    if (at === from) at = to;
    const b = BYTES[body[at]];
    if (!b) continue;
    if (inString) {
      if (b === Byte.Backslash) at++;
      else if (b === Byte.Quote) inString = false;
    } else if (b === Byte.Quote) inString = true;
    else if (b === Byte.Comma) values++;
    else if (b === Byte.Open) {
      if (++depth > MAX_JSON_DEPTH)
        throw new SyntaxError(
          `JSON nested deeper than ${MAX_JSON_DEPTH} levels at position ${at}; a tile request nests 2`,
        );
    } else if (b === Byte.Close) depth--;
  }
  return values;
}

/** scanJson, and a 422 where the body holds more values than `limit` allows. */
function checkShape(body: Buffer, limit: ValueLimit, skip?: [number, number]): void {
  if (scanJson(body, skip) >= limit.values)
    throw errors.tileInvalid([
      {
        loc: ['body'],
        msg: `Value error, the body holds more than ${limit.values} values; ${limit.expected}`,
        type: 'value_error',
        ctx: { limit: limit.values },
      },
    ]);
}

export function parseJsonBody(body: Buffer, limit: ValueLimit): unknown {
  const value = parseTileBody(body, limit) ?? (checkShape(body, limit), withImage(JSON.parse(body.toString('utf8'))));
  if (value !== null && typeof value === 'object')
    for (const key of FORBIDDEN) if (Object.hasOwn(value, key)) delete (value as Record<string, unknown>)[key];
  return value;
}

/** The value parsed the long way, a string image_data decoded; any other left as sent. */
function withImage(value: unknown): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  const body = value as Record<string, unknown>;
  if (Object.hasOwn(body, 'image_data') && typeof body.image_data === 'string')
    body.image_data = imageOf(decodeBase64Strict(body.image_data));
  return body;
}

const imageOf = (decoded: ReturnType<typeof decodeBase64Strict>): TileImage =>
  'reason' in decoded ? notBase64(decoded.reason) : pngImage(decoded.bytes, 'image_data');

/** The body with image_data's bytes decoded from the body's bytes, or null where that shortcut
 *  cannot be sure to give what JSON.parse would (then the caller parses the whole text). It
 *  holds when the value is ASCII without escapes and is strict base64 (so it holds no control
 *  character JSON would refuse), and when the marker put in its place comes back as the
 *  top-level image_data (so the key found was not a nested or duplicated one). */
export function parseTileBody(body: Buffer, limit: ValueLimit): Record<string, unknown> | null {
  const key = body.indexOf(KEY);
  if (key < 0) return null;
  let start = skipSpace(body, key + KEY.length);
  if (body[start] !== 0x3a) return null;
  start = skipSpace(body, start + 1);
  if (body[start++] !== QUOTE) return null;
  const end = body.indexOf(QUOTE, start);
  if (end < 0) return null;
  const raw = body.subarray(start, end);
  if (raw.indexOf(BACKSLASH) >= 0 || !isAscii(raw)) return null;
  const decoded = decodeBase64Strict(raw);
  if ('reason' in decoded) return null;
  checkShape(body, limit, [start, end]);
  let value: unknown;
  try {
    value = JSON.parse(`${body.toString('utf8', 0, start)}${MARKER}${body.toString('utf8', end)}`);
  } catch {
    return null; // Malformed: the long way reports the error at its place in the body as sent.
  }
  if (value === null || typeof value !== 'object' || (value as Record<string, unknown>).image_data !== MARKER)
    return null;
  (value as Record<string, unknown>).image_data = imageOf(decoded);
  return value as Record<string, unknown>;
}

function skipSpace(body: Buffer, at: number): number {
  while (body[at] === 0x20 || body[at] === 0x09 || body[at] === 0x0a || body[at] === 0x0d) at++;
  return at;
}

export interface JsonBodyOptions {
  /** The values a request's route takes. */
  values: (request: FastifyRequest) => ValueLimit;
}

async function jsonBody(app: FastifyInstance, { values }: JsonBodyOptions): Promise<void> {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      done(null, parseJsonBody(body as Buffer, values(request)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}

export default fp(jsonBody, { name: 'json-body' });
