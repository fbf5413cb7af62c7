// The JSON body parser. fastify's default (secure-json-parse) runs two regular expressions over
// the whole text of every body to find "__proto__" and "constructor": on a tile, hundreds of
// kilobytes of base64, that was the largest single cost in a front's profile (11% of its CPU).
// A tile request is a flat object whose fields the schema names, so the same protection is
// dropping those two keys from the top level, whatever the text's size.
// A tile body is nearly all image_data, so that field is found and base64-decoded in the bytes,
// and only the rest is decoded as text and parsed (parseTileBody, image-data.ts).
import { isAscii } from 'node:buffer';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { decodeBase64Strict } from '../../tile/base64.js';
import { keepImageBytes } from '../image-data.js';

const FORBIDDEN = ['__proto__', 'constructor'];
const KEY = Buffer.from('"image_data"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** Stands in for image_data's value while the rest is parsed; random, so no body can hold it. */
const PLACEHOLDER = `image_data ${randomBytes(16).toString('hex')}`;

export function parseJsonBody(body: Buffer): unknown {
  const value = parseTileBody(body) ?? JSON.parse(body.toString('utf8'));
  if (value !== null && typeof value === 'object') for (const key of FORBIDDEN) if (Object.hasOwn(value, key)) delete value[key];
  return value;
}

/** The body with image_data's bytes decoded from the body's bytes, or null where that shortcut
 *  cannot be sure to give what JSON.parse would (then the caller parses the whole text). It
 *  holds when the value is ASCII without escapes and is strict base64 (so it holds no control
 *  character JSON would refuse), and when the placeholder put in its place comes back as the
 *  top-level image_data (so the key found was not a nested or duplicated one). */
function parseTileBody(body: Buffer): Record<string, unknown> | null {
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
  let value: unknown;
  try {
    value = JSON.parse(`${body.toString('utf8', 0, start)}${PLACEHOLDER}${body.toString('utf8', end)}`);
  } catch {
    return null; // Malformed: the long way reports the error at its place in the body as sent.
  }
  if (value === null || typeof value !== 'object' || (value as Record<string, unknown>).image_data !== PLACEHOLDER) return null;
  keepImageBytes(value as Record<string, unknown>, decoded.bytes);
  return value as Record<string, unknown>;
}

function skipSpace(body: Buffer, at: number): number {
  while (body[at] === 0x20 || body[at] === 0x09 || body[at] === 0x0a || body[at] === 0x0d) at++;
  return at;
}

async function jsonBody(app: FastifyInstance): Promise<void> {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as Buffer));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}

export default fp(jsonBody, { name: 'json-body' });
