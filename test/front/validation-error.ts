// Unit tests of the ajv -> pydantic error mapping, through fastify's own validator, with the
// front's body parsers and the route's body schema (the contract's, image_data decoded).
import t from 'tap';
import Fastify from 'fastify';
import errors from '../../src/front/plugins/errors.js';
import jsonBody from '../../src/front/plugins/json-body.js';
import nonJsonBody from '../../src/front/plugins/non-json-body.js';
import { PredictQuery } from '../../src/contract/schemas.js';
import { TileBody, tileImageKeyword } from '../../src/front/tile-image.js';
import { jsonInvalid, literalItem, MAX_ITEMS } from '../../src/front/validation-error.js';

/** Room for the mapping's own cases (the front's limit is the route's: plugins/json-body.ts). */
const values = () => ({ values: 1_000_000, expected: 'what the test allows' });

async function app() {
  const app = Fastify({ ajv: { customOptions: { allErrors: true, coerceTypes: false }, plugins: [tileImageKeyword] } });
  await app.register(errors, { retryAfterS: 1, models: () => [] });
  await app.register(jsonBody, { values });
  await app.register(nonJsonBody, { values });
  app.post('/tile', { schema: { body: TileBody, querystring: PredictQuery } }, async () => ({ ok: true }));
  return app;
}

/** A JSON body sent as it is written (malformed, not an object), not serialised by inject. */
const postText = (server: Awaited<ReturnType<typeof app>>, text: string) =>
  server.inject({ method: 'POST', url: '/tile', payload: text, headers: { 'content-type': 'application/json' } });

const valid = { image_data: 'iVBORw0KGgo=', slide_name: 's', x: 0, y: 0, width: 224, height: 224, patch_idx: 0 };

t.test('types map to pydantic type names with the offending input', async (t) => {
  const server = await app();
  const res = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: { ...valid, x: 'left', y: 2.5, slide_name: 3, width: true, bulk_rna: 'abc', tissue_ratio: 'half' },
  });
  t.equal(res.statusCode, 422);
  t.same(res.json().detail, [
    { loc: ['body', 'slide_name'], msg: 'Input should be a valid string', type: 'string_type', input: 3 },
    { loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type', input: 'left' },
    {
      loc: ['body', 'y'],
      msg: 'Input should be a valid integer, got a number with a fractional part',
      type: 'int_from_float',
      input: 2.5,
    },
    { loc: ['body', 'width'], msg: 'Input should be a valid integer', type: 'int_type', input: true },
    { loc: ['body', 'bulk_rna'], msg: 'Input should be a valid list', type: 'list_type', input: 'abc' },
    { loc: ['body', 'tissue_ratio'], msg: 'Input should be a valid number', type: 'float_type', input: 'half' },
  ]);
});

t.test('missing fields, bounds, list items and query literals', async (t) => {
  const server = await app();
  const { image_data: _omit, ...rest } = valid;
  const res = await server.inject({
    method: 'POST',
    url: '/tile?mode=fast',
    payload: { ...rest, width: 0, bulk_rna: [1, 'x', 3] },
  });
  const detail = res.json().detail;
  t.equal(res.statusCode, 422);
  t.same(
    detail,
    [
      {
        loc: ['query', 'mode'],
        msg: "Input should be 'prediction' or 'prediction_with_embedding'",
        type: 'literal_error',
        ctx: { expected: "'prediction' or 'prediction_with_embedding'" },
        input: 'fast',
      },
      { loc: ['body', 'image_data'], msg: 'Field required', type: 'missing' },
      {
        loc: ['body', 'width'],
        msg: 'Input should be greater than or equal to 1',
        type: 'greater_than_equal',
        ctx: { ge: 1 },
        input: 0,
      },
      { loc: ['body', 'bulk_rna', 1], msg: 'Input should be a valid number', type: 'float_type', input: 'x' },
    ],
    'query and body errors together',
  );
});

t.test('200,000 bad list items: the first MAX_ITEMS are listed, the other fields still', async (t) => {
  const server = await app();
  const started = performance.now();
  const res = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: { ...valid, width: 0, bulk_rna: Array(200_000).fill('a') },
  });
  t.equal(res.statusCode, 422);
  const detail = res.json().detail as { loc: (string | number)[] }[];
  t.equal(detail.length, MAX_ITEMS, `${MAX_ITEMS} items in ${(performance.now() - started).toFixed(0)} ms`);
  t.same(detail[0].loc, ['body', 'width'], 'the fields before the list');
  t.same(detail.at(-1)!.loc, ['body', 'bulk_rna', MAX_ITEMS - 2]);
});

t.test('a body that is not an object, and nulls for optional fields', async (t) => {
  const server = await app();
  const array = await postText(server, '[1,2]');
  t.same(array.json().detail, [
    {
      loc: ['body'],
      msg: 'Input should be a valid dictionary or object to extract fields from',
      type: 'model_attributes_type',
    },
  ]);
  const nulls = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: { ...valid, bulk_rna: null, tissue_ratio: null, resolution: null },
  });
  t.equal(nulls.statusCode, 200);
});

t.test('long inputs are not echoed back', async (t) => {
  const server = await app();
  const res = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: { ...valid, slide_name: 'y'.repeat(300), x: 'z'.repeat(300) },
  });
  t.same(res.json().detail, [{ loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type' }]);
});

t.test('malformed JSON', async (t) => {
  const server = await app();
  const res = await postText(server, '{"x": ');
  t.equal(res.statusCode, 422);
  t.match(res.json().detail[0], { type: 'json_invalid', msg: 'JSON decode error', ctx: { error: String } });
  const empty = await postText(server, '');
  t.equal(empty.statusCode, 422);
  t.same(jsonInvalid('Unexpected token } in JSON at position 18').loc, ['body', 18]);
});

t.test('tissue_ratio is a fraction from 0 to 1', async (t) => {
  const server = await app();
  const high = await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, tissue_ratio: 1.5 } });
  t.equal(high.statusCode, 422);
  t.same(high.json().detail, [
    {
      loc: ['body', 'tissue_ratio'],
      msg: 'Input should be less than or equal to 1',
      type: 'less_than_equal',
      ctx: { le: 1 },
      input: 1.5,
    },
  ]);
  const low = await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, tissue_ratio: -0.1 } });
  t.same(low.json().detail, [
    {
      loc: ['body', 'tissue_ratio'],
      msg: 'Input should be greater than or equal to 0',
      type: 'greater_than_equal',
      ctx: { ge: 0 },
      input: -0.1,
    },
  ]);
  for (const ratio of [0, 1, 0.5])
    t.equal(
      (await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, tissue_ratio: ratio } })).statusCode,
      200,
      `${ratio} accepted`,
    );
});

t.test('a body that is not JSON answers as FastAPI does: 422 at ["body"]', async (t) => {
  const server = await app();
  const expected = (input: string) => [
    {
      loc: ['body'],
      msg: 'Input should be a valid dictionary or object to extract fields from',
      type: 'model_attributes_type',
      input,
    },
  ];
  const text = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: 'hello',
    headers: { 'content-type': 'text/plain' },
  });
  t.equal(text.statusCode, 422);
  t.same(text.json().detail, expected('hello'));
  const form = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: 'x=1&y=2',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  t.same([form.statusCode, form.json().detail], [422, expected('x=1&y=2')]);
  const multipart = await server.inject({
    method: 'POST',
    url: '/tile',
    payload: '--b\r\ncontent-disposition: form-data; name="x"\r\n\r\n1\r\n--b--',
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
  });
  t.same([multipart.statusCode, multipart.json().detail[0].type], [422, 'model_attributes_type']);
  const none = await server.inject({ method: 'POST', url: '/tile', payload: Buffer.from(JSON.stringify(valid)) });
  t.equal(none.statusCode, 200, 'no content type: parsed as JSON, as FastAPI does');
  const noneBad = await server.inject({ method: 'POST', url: '/tile', payload: Buffer.from('{"x": ') });
  t.same([noneBad.statusCode, noneBad.json().detail[0].type], [422, 'json_invalid']);
  for (const type of ['', 'garbage', 'text/']) {
    const bad = await server.inject({ method: 'POST', url: '/tile', payload: '{}', headers: { 'content-type': type } });
    t.same(
      [bad.statusCode, bad.json().detail],
      [
        422,
        [
          {
            loc: ['body'],
            msg: 'Input should be a valid dictionary or object to extract fields from',
            type: 'model_attributes_type',
          },
        ],
      ],
      `content-type ${JSON.stringify(type)}`,
    );
  }
});

t.test('a number out of range (1e400) says so', async (t) => {
  const server = await app();
  const body = JSON.stringify({ ...valid, x: 'X', bulk_rna: [1, 'B'], tissue_ratio: 'T' })
    .replace('"X"', '1e400')
    .replace('"B"', '-1e400')
    .replace('"T"', '1e400');
  const res = await postText(server, body);
  t.equal(res.statusCode, 422);
  const msg = 'Input should be a finite number; the number is out of range (beyond 1.8e+308 in magnitude)';
  t.same(res.json().detail, [
    { loc: ['body', 'x'], msg, type: 'finite_number' },
    { loc: ['body', 'bulk_rna', 1], msg, type: 'finite_number' },
    { loc: ['body', 'tissue_ratio'], msg, type: 'finite_number' },
  ]);
});

t.test('other failures are a plain 500 without the reason', async (t) => {
  const server = Fastify({ logger: false });
  await server.register(errors, { retryAfterS: 1, models: () => [] });
  server.get('/boom', async () => {
    throw new Error('secret internals');
  });
  const res = await server.inject('/boom');
  t.equal(res.statusCode, 500);
  t.same(res.json(), { detail: 'Internal server error' });
});

t.test("a handler's own literal_error item is worded as the schema's", async (t) => {
  t.strictSame(literalItem(['query', 'categories'], ['usage', 'diagnostics'], 'x', ' (comma-separated)'), {
    loc: ['query', 'categories'],
    msg: "Input should be 'usage' or 'diagnostics' (comma-separated)",
    type: 'literal_error',
    ctx: { expected: "'usage' or 'diagnostics'" },
    input: 'x',
  });
});
