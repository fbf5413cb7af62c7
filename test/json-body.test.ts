// The tile body parser's shortcut (image_data found and decoded in the bytes) against the long
// way (JSON.parse of the whole text, then strict base64): the same fields, the same bytes, the
// same refusals, for hand-picked traps and for generated bodies.
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { parseJsonBody } from '../src/front/plugins/json-body.js';
import { DECODED_IMAGE, imageBytes } from '../src/front/image-data.js';
import { decodeBase64Strict } from '../src/tile/base64.js';

type Outcome = { error: string } | { fields: Record<string, unknown>; image: string };

/** What a body means: its fields but image_data, and image_data's bytes or refusal; or the
 *  parse error, whose message gives the position in the body as sent (FastAPI's loc). */
function outcome(parse: () => unknown): Outcome {
  let value: unknown;
  try {
    value = parse();
  } catch (err) {
    return { error: (err as Error).message };
  }
  if (value === null || typeof value !== 'object' || typeof (value as Record<string, unknown>).image_data !== 'string') return { fields: { value }, image: '' };
  const body = value as { image_data: string } & Record<string, unknown>;
  const decoded = imageBytes(body);
  const fields = Object.fromEntries(Object.entries(body).filter(([k]) => k !== 'image_data'));
  return { fields, image: 'bytes' in decoded ? decoded.bytes.toString('hex') : decoded.reason };
}

function theLongWay(text: string): Outcome {
  return outcome(() => {
    const value = JSON.parse(text);
    if (value && typeof value === 'object') for (const key of ['__proto__', 'constructor']) if (Object.hasOwn(value, key)) delete value[key];
    return value;
  });
}

const same = (t: Test, text: string, name: string) => t.same(outcome(() => parseJsonBody(Buffer.from(text))), theLongWay(text), name);

const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex').toString('base64');

t.test('the shortcut takes a plain tile body and decodes image_data once', async (t) => {
  const body = parseJsonBody(Buffer.from(JSON.stringify({ image_data: png, slide_name: 's', x: 1 }))) as Record<string, unknown> & { image_data: string };
  t.equal(body.image_data, DECODED_IMAGE, 'the text was never made a string');
  t.same(imageBytes(body), { bytes: Buffer.from(png, 'base64') });
  t.same({ ...body, image_data: undefined }, { image_data: undefined, slide_name: 's', x: 1 });
});

t.test('traps give what the long way gives', async (t) => {
  const traps: Record<string, string> = {
    'nested key first': `{"meta": {"image_data": "QUFB"}, "image_data": "${png}"}`,
    'nested key only': `{"meta": {"image_data": "${png}"}}`,
    'nested key, empty top-level value': `{"meta": {"image_data": "QUFB"}, "image_data": ""}`,
    'duplicate key': `{"image_data": "QUFB", "image_data": "${png}"}`,
    'escaped key': `{"image\\u005fdata": "QUFB", "x": {"image_data": "${png}"}}`,
    'escaped slash in the value': `{"image_data": "${png.replace('/', '\\/')}"}`,
    'raw newline in the value': `{"image_data": "${png.slice(0, 8)}\n${png.slice(8)}"}`,
    'non-ASCII in the value': `{"image_data": "${png}é"}`,
    'URL-safe alphabet': `{"image_data": "${png.replace('+', '-')}"}`,
    'not a multiple of 4': `{"image_data": "${png}A"}`,
    'spaces around the colon': `{"image_data" \t:\n "${png}", "y": 2}`,
    'a number, not a string': `{"image_data": 5}`,
    'unterminated': `{"image_data": "${png}`,
    'truncated after the value': `{"image_data": "${png}", "x":`,
    'a syntax error after the value': `{"image_data": "${png}", "x": 1,, "y": 2}`,
    '__proto__ beside it': `{"__proto__": {"polluted": 1}, "image_data": "${png}"}`,
    'an array at the top': `[{"image_data": "${png}"}]`,
  };
  for (const [name, text] of Object.entries(traps)) same(t, text, name);
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype pollution');
});

t.test('generated bodies: the shortcut and the long way agree', async (t) => {
  const base64ish = fc.stringMatching(/^[A-Za-z0-9+/=\-_ é\\"\n]{0,24}$/);
  const body = fc.record({
    before: fc.dictionary(fc.constantFrom('slide_name', 'x', 'meta', 'image_data', 'tissue_ratio'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
    image: fc.oneof(fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('base64')), base64ish),
    after: fc.dictionary(fc.constantFrom('y', 'meta', 'image_data'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }),
    space: fc.constantFrom('', ' ', '\n\t'),
  });
  fc.assert(
    fc.property(body, ({ before, image, after, space }) => {
      const head = JSON.stringify(before).slice(0, -1);
      const text = `${head}${head.length > 1 ? ',' : ''}"image_data"${space}:${space}${JSON.stringify(image)}${Object.keys(after).length ? ',' : ''}${JSON.stringify(after).slice(1)}`;
      const a = outcome(() => parseJsonBody(Buffer.from(text)));
      const b = theLongWay(text);
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${text}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 generated bodies agree');
});

t.test('strict base64 from bytes decodes as from text, across slice boundaries', async (t) => {
  for (const size of [0, 1, 2, 3, 24575, 24576, 24577, 100_000]) {
    const text = Buffer.from(Buffer.alloc(size).map((_, i) => (i * 37) & 255)).toString('base64');
    t.same(decodeBase64Strict(Buffer.from(text)), decodeBase64Strict(text), `${size} bytes`);
  }
  t.match(decodeBase64Strict(Buffer.from('QU-B')), { reason: /URL-safe/ });
  t.match(decodeBase64Strict(Buffer.from('QU B')), { reason: /characters outside/ });
});
