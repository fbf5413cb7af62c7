// The tile body parser's shortcut (image_data found and decoded in the bytes) against the long
// way (JSON.parse of the whole text, then strict base64): the same fields, the same bytes, the
// same refusals, for hand-picked traps and for generated bodies.
import t, { type Test } from 'tap';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { parseJsonBody, parseTileBody } from '../src/front/plugins/json-body.js';
import { ServiceError } from '../src/lib/errors.js';
import { EXTRA_VALUES, valueLimit } from '../src/front/tile-checks.js';
import { readManifest } from '../src/model-package/model-package.js';
import { join } from 'node:path';
import { MODELS } from './helpers/server.js';
import { isTileImage, type TileImage } from '../src/front/tile-image.js';
import { decodeBase64Strict } from '../src/tile/base64.js';
import Fastify, { type FastifyError } from 'fastify';
import { TileRequest } from '../src/contract/schemas.js';
import { toValidationItems } from '../src/front/validation-error.js';
import { fakeService } from './helpers/fake-backend.js';
import { cellularPng, tileRequest } from './helpers/tiles.js';

/** Room for any nesting the equivalence cases make: the limit has its own test below. */
const UNBOUNDED = { values: Number.MAX_SAFE_INTEGER, expected: '' };

type Outcome = { error: string } | { fields: Record<string, unknown>; image: string };

/** What a body means: its fields but image_data, and image_data's bytes or refusal; or the
 *  parse error, whose message gives the position in the body as sent (FastAPI's loc). The
 *  parser's image_data is the decoded image (a string one is never left); the long way's is the
 *  text, decoded here. */
function outcome(parse: () => unknown, longWay = false): Outcome {
  let value: unknown;
  try {
    value = parse();
  } catch (err) {
    return { error: (err as Error).message };
  }
  const image = value !== null && typeof value === 'object' ? (value as Record<string, unknown>).image_data : undefined;
  if (longWay ? typeof image !== 'string' : !isTileImage(image)) return { fields: { value }, image: '' };
  const fields = Object.fromEntries(
    Object.entries(value as Record<string, unknown>).filter(([k]) => k !== 'image_data'),
  );
  return { fields, image: described(longWay ? decodeBase64Strict(image as string) : (image as TileImage)) };
}

function described(image: TileImage | ReturnType<typeof decodeBase64Strict>): string {
  if ('reason' in image) return image.reason;
  return 'bytes' in image ? image.bytes.toString('hex') : 'not an image';
}

function theLongWay(text: string): Outcome {
  return outcome(() => {
    const value = JSON.parse(text);
    if (value && typeof value === 'object')
      for (const key of ['__proto__', 'constructor']) if (Object.hasOwn(value, key)) delete value[key];
    return value;
  }, true);
}

const same = (t: Test, text: string, name: string) =>
  t.same(
    outcome(() => parseJsonBody(Buffer.from(text), UNBOUNDED)),
    theLongWay(text),
    name,
  );

const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex').toString('base64');

t.test('the shortcut takes a plain tile body and decodes image_data once', async (t) => {
  const text = Buffer.from(JSON.stringify({ image_data: png, slide_name: 's', x: 1 }));
  t.ok(parseTileBody(text, UNBOUNDED), 'the shortcut takes it: the text was never made a string');
  const body = parseJsonBody(text, UNBOUNDED) as Record<string, unknown> & { image_data: TileImage };
  t.match(
    body.image_data,
    { format: 'png', bytes: Buffer.from(png, 'base64'), from: 'image_data' },
    'image_data is the decoded image',
  );
  t.ok(isTileImage(body.image_data));
  t.same({ ...body, image_data: undefined }, { image_data: undefined, slide_name: 's', x: 1 });
});

t.test('a JSON body cannot pass for a decoded image', async (t) => {
  const body = parseJsonBody(
    Buffer.from(JSON.stringify({ image_data: { format: 'png', bytes: [1], from: 'image_data' } })),
    UNBOUNDED,
  ) as Record<string, unknown>;
  t.notOk(isTileImage(body.image_data), 'an object sent as image_data stays what it was');
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
    unterminated: `{"image_data": "${png}`,
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
    before: fc.dictionary(
      fc.constantFrom('slide_name', 'x', 'meta', 'image_data', 'tissue_ratio'),
      fc.jsonValue({ maxDepth: 2 }),
      { maxKeys: 3 },
    ),
    image: fc.oneof(
      fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('base64')),
      base64ish,
    ),
    after: fc.dictionary(fc.constantFrom('y', 'meta', 'image_data'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }),
    space: fc.constantFrom('', ' ', '\n\t'),
  });
  fc.assert(
    fc.property(body, ({ before, image, after, space }) => {
      const head = JSON.stringify(before).slice(0, -1);
      const text = `${head}${head.length > 1 ? ',' : ''}"image_data"${space}:${space}${JSON.stringify(image)}${Object.keys(after).length ? ',' : ''}${JSON.stringify(after).slice(1)}`;
      const a = outcome(() => parseJsonBody(Buffer.from(text), UNBOUNDED));
      const b = theLongWay(text);
      if (JSON.stringify(a) !== JSON.stringify(b))
        throw new Error(`${text}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 generated bodies agree');
});

t.test("values past the route's limit: a 422 before JSON.parse, on either path", async (t) => {
  const manifest = readManifest(join(MODELS, 'gene-expr'));
  const limit = valueLimit({ name: 'gene-expr', manifest });
  t.equal(limit.values, 50 + EXTRA_VALUES);
  const body = (counts: number, image = png) =>
    Buffer.from(
      `{"slide_name": "a, b", "x": 1, "image_data": "${image}", "bulk_rna": [${Array(counts).fill('"a"').join(',')}]}`,
    );
  /** What the parser makes of `text`: the value, or its refusal. */
  const parsed = (text: Buffer) => {
    try {
      return parseJsonBody(text, limit) as Record<string, unknown>;
    } catch (err) {
      return err as Error;
    }
  };
  const refusal = {
    detail: [
      {
        loc: ['body'],
        type: 'value_error',
        msg: `Value error, the body holds more than ${limit.values} values; a gene-expr tile request holds its fields and its 50 bulk_rna counts (GET /api/metadata/gene-expr)`,
        ctx: { limit: limit.values },
      },
    ],
  };
  // The commas between values are counted, a string's not ("a, b"): 3 between the fields, and
  // counts - 1 in bulk_rna.
  const most = limit.values - 3;
  for (const image of [png, png.replace('/', '\\/')]) {
    const path = image === png ? 'the shortcut' : 'the long way';
    t.equal((parsed(body(most, image)) as { bulk_rna: string[] }).bulk_rna.length, most, `${path}: the most it takes`);
    const refused = parsed(body(most + 1, image));
    t.ok(refused instanceof ServiceError, `${path}: one more is refused`);
    t.match((refused as ServiceError).body(), refusal);
  }
  // As many fields, at the top level, as well.
  const fields = Array.from({ length: limit.values + 1 }, (_, i) => `"f${i}": ${i}`).join(', ');
  const wide = parsed(Buffer.from(`{"image_data": "${png}", ${fields}}`));
  t.ok(wide instanceof ServiceError, 'as many fields: refused');
  t.match(valueLimit({ name: 'tissue-seg' }), { values: EXTRA_VALUES, expected: /takes no bulk_rna/ });
  t.match(valueLimit(), { values: EXTRA_VALUES });
});

t.test('strict base64 from bytes decodes as from text, across slice boundaries', async (t) => {
  for (const size of [0, 1, 2, 3, 24575, 24576, 24577, 100_000]) {
    const text = Buffer.from(Buffer.alloc(size).map((_, i) => (i * 37) & 255)).toString('base64');
    t.same(decodeBase64Strict(Buffer.from(text)), decodeBase64Strict(text), `${size} bytes`);
  }
  t.match(decodeBase64Strict(Buffer.from('QU-B')), { reason: /URL-safe/ });
  t.match(decodeBase64Strict(Buffer.from('QU B')), { reason: /characters outside/ });
});

t.test('generated bodies: the 422s of the schema are those of the contract schema, as sent', async (t) => {
  // The reference: the contract's TileRequest validated by fastify's ajv, with the front's options,
  // on the body as sent (image_data a string), reported in the pydantic shape.
  // A "__proto__" or "constructor" key inside a field's value (fast-check's JSON values hold
  // them) stays an own property, as JSON.parse and the front leave it (the front drops those keys
  // at the top level only): fastify's default parser would answer 400 instead.
  const reference = Fastify({
    onProtoPoisoning: 'ignore',
    onConstructorPoisoning: 'ignore',
    ajv: { customOptions: { allErrors: true, coerceTypes: false } },
  });
  reference.post('/', { schema: { body: TileRequest } }, async () => ({ valid: true }));
  reference.setErrorHandler(async (error: FastifyError, request) => ({
    detail: toValidationItems(error.validation!, 'body', request.body),
  }));
  const { app } = await fakeService();
  // A small tile: bodies that pass the schema are refused by the tile checks, cheaply.
  const tile = tileRequest(cellularPng(1, 16));
  // biome-ignore lint/correctness/noPrecisionLoss: past float64 on purpose (Infinity, which JSON writes as null)
  const huge = 1e400;
  const field = fc.oneof(
    fc.constantFrom(0, 1, 224, -1, 0.5, '', 'x', null, true, [], {}, [1, 'a'], huge),
    fc.jsonValue({ maxDepth: 1 }),
  );
  const image = fc.oneof(fc.constant(tile.image_data), fc.constantFrom('QUFB', 'QU-B', 'A', '', 5, null, [], { a: 1 }));
  const keys = [
    'image_data',
    'slide_name',
    'x',
    'y',
    'width',
    'height',
    'patch_idx',
    'bulk_rna',
    'tissue_ratio',
    'resolution',
  ];
  const body = fc
    .record({
      image,
      set: fc.dictionary(fc.constantFrom(...keys.slice(1)), field, { maxKeys: 4 }),
      drop: fc.subarray(keys, { maxLength: 3 }),
    })
    .map(({ image, set, drop }) => {
      const b: Record<string, unknown> = { ...tile, image_data: image, ...set };
      for (const key of drop) delete b[key];
      return JSON.stringify(b);
    });
  let schemaFailures = 0;
  await fc.assert(
    fc.asyncProperty(body, async (text) => {
      const expected = (
        await reference.inject({
          method: 'POST',
          url: '/',
          headers: { 'content-type': 'application/json' },
          payload: text,
        })
      ).json();
      const res = await app.inject({
        method: 'POST',
        url: '/api/predict/gene-expr',
        headers: { 'content-type': 'application/json' },
        payload: text,
      });
      if (expected.valid) {
        // The schema passed: whatever the tile checks say, no item is the schema's.
        if (
          res.statusCode === 422 &&
          res.json().detail.some((d: { type: string }) => ['missing', 'string_type', 'int_type'].includes(d.type))
        )
          throw new Error(`${text}: ${res.body}`);
        return;
      }
      schemaFailures++;
      if (res.statusCode !== 422 || !isDeepStrictEqual(res.json(), expected))
        throw new Error(`${text}: ${res.body} vs ${JSON.stringify(expected)}`);
    }),
    { numRuns: 300, examples: [[JSON.stringify({ ...tile, slide_name: JSON.parse('{"__proto__": null}') })]] },
  );
  t.ok(
    schemaFailures > 100,
    `${schemaFailures} of 300 bodies failed the schema, each with the same items in the same order`,
  );
});
