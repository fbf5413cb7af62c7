// Unit tests of the ajv -> pydantic error mapping, through fastify's own validator.
import t from 'tap';
import Fastify from 'fastify';
import errors from '../src/http/plugins/errors.js';
import { TileRequest, PredictQuery } from '../src/http/schemas/tile.js';
import { jsonInvalid } from '../src/http/validation-error.js';

async function app() {
  const app = Fastify({ ajv: { customOptions: { allErrors: true, coerceTypes: false } } });
  await app.register(errors, { retryAfterS: 1, models: () => [] });
  app.post('/tile', { schema: { body: TileRequest, querystring: PredictQuery } }, async () => ({ ok: true }));
  return app;
}

const valid = { image_data: 'iVBORw0KGgo=', slide_name: 's', x: 0, y: 0, width: 224, height: 224, patch_idx: 0 };

t.test('types map to pydantic type names with the offending input', async (t) => {
  const server = await app();
  const res = await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, x: 'left', y: 2.5, slide_name: 3, width: true, bulk_rna: 'abc', tissue_ratio: 'half' } });
  t.equal(res.statusCode, 422);
  t.same(res.json().detail, [
    { loc: ['body', 'slide_name'], msg: 'Input should be a valid string', type: 'string_type', input: 3 },
    { loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type', input: 'left' },
    { loc: ['body', 'y'], msg: 'Input should be a valid integer, got a number with a fractional part', type: 'int_from_float', input: 2.5 },
    { loc: ['body', 'width'], msg: 'Input should be a valid integer', type: 'int_type', input: true },
    { loc: ['body', 'bulk_rna'], msg: 'Input should be a valid list', type: 'list_type', input: 'abc' },
    { loc: ['body', 'tissue_ratio'], msg: 'Input should be a valid number', type: 'float_type', input: 'half' },
  ]);
});

t.test('missing fields, bounds, list items and query literals', async (t) => {
  const server = await app();
  const { image_data: _omit, ...rest } = valid;
  const res = await server.inject({ method: 'POST', url: '/tile?mode=fast', payload: { ...rest, width: 0, bulk_rna: [1, 'x', 3] } });
  const detail = res.json().detail;
  t.equal(res.statusCode, 422);
  t.same(detail, [
    { loc: ['query', 'mode'], msg: "Input should be 'prediction' or 'prediction_with_embedding'", type: 'literal_error', ctx: { expected: "'prediction' or 'prediction_with_embedding'" }, input: 'fast' },
    { loc: ['body', 'image_data'], msg: 'Field required', type: 'missing' },
    { loc: ['body', 'width'], msg: 'Input should be greater than or equal to 1', type: 'greater_than_equal', ctx: { ge: 1 }, input: 0 },
    { loc: ['body', 'bulk_rna', 1], msg: 'Input should be a valid number', type: 'float_type', input: 'x' },
  ], 'query and body errors together');
});

t.test('a body that is not an object, and nulls for optional fields', async (t) => {
  const server = await app();
  const array = await server.inject({ method: 'POST', url: '/tile', payload: '[1,2]', headers: { 'content-type': 'application/json' } });
  t.same(array.json().detail, [{ loc: ['body'], msg: 'Input should be a valid dictionary or object to extract fields from', type: 'model_attributes_type' }]);
  const nulls = await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, bulk_rna: null, tissue_ratio: null, resolution: null } });
  t.equal(nulls.statusCode, 200);
});

t.test('long inputs are not echoed back', async (t) => {
  const server = await app();
  const res = await server.inject({ method: 'POST', url: '/tile', payload: { ...valid, slide_name: 'y'.repeat(300), x: 'z'.repeat(300) } });
  t.same(res.json().detail, [{ loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type' }]);
});

t.test('malformed JSON', async (t) => {
  const server = await app();
  const res = await server.inject({ method: 'POST', url: '/tile', payload: '{"x": ', headers: { 'content-type': 'application/json' } });
  t.equal(res.statusCode, 422);
  t.match(res.json().detail[0], { type: 'json_invalid', msg: 'JSON decode error', ctx: { error: String } });
  const empty = await server.inject({ method: 'POST', url: '/tile', payload: '', headers: { 'content-type': 'application/json' } });
  t.equal(empty.statusCode, 422);
  t.same(jsonInvalid('Unexpected token } in JSON at position 18').loc, ['body', 18]);
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
