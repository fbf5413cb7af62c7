// Property-based fuzzing of the real service over HTTP (fast-check): any method, path, query,
// header and body, from plausible to hostile, JSON and binary (PNG, raw RGB) tile bodies. The property: never a 5xx, and afterwards the
// service is ready, serves a valid tile and no worker has restarted.
import { request } from 'node:http';
import fc from 'fast-check';
import type { Test } from 'tap';
import type { TestServer } from './server.js';
import { cellularPng, tileRequest } from './tiles.js';

export interface FuzzRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | null;
}

interface Reply {
  status: number;
  body: string;
}

/** Raw node:http, so that any header and body can go out; a connection per request, so that one
 *  the server closes (after a 400, say) cannot fail the next. */
export function send(url: string, req: FuzzRequest): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const r = request(url + req.path, { method: req.method, headers: req.headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(req.body ?? undefined);
  });
}

const MODEL_PATHS = (models: string[]) => models.flatMap((m) => [`/api/predict/${m}`, `/api/embed/${m}`]);
const OTHER_PATHS = [
  '/health/live',
  '/health/ready',
  '/diagnostics',
  '/metrics',
  '/openapi.json',
  '/docs',
  '/docs/json',
  '/',
  '/api',
  '/api/predict',
  '/api/predict/',
  '/api/embed/%00',
  '/api/predict/..%2F..%2Fetc%2Fpasswd',
];
const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/JSON',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/octet-stream',
  'application/vnd.api+json',
  '',
  'garbage',
  'application/json; charset=latin1',
  '*/*',
];

/** Tokens that are legal in a header value (node:http refuses control characters). */
const headerValue = fc.string({ maxLength: 40 }).map((s) => s.replace(/[^\t\x20-\x7e]/g, ''));
const headerName = fc.stringMatching(/^[a-z][a-z0-9-]{0,15}$/);

/** A PNG damaged in one of the ways a broken encoder, a truncated upload or an attacker would. */
function damagedPng(png: Buffer): fc.Arbitrary<Buffer> {
  return fc.oneof(
    fc
      .record({ at: fc.nat(png.length - 1), value: fc.integer({ min: 0, max: 255 }) })
      .map(({ at, value }) => Buffer.from(png).fill(value, at, at + 1)),
    fc.nat(png.length).map((n) => png.subarray(0, n)),
    fc
      .record({ w: fc.integer({ min: 0, max: 2 ** 32 - 1 }), h: fc.integer({ min: 0, max: 2 ** 32 - 1 }) })
      .map(({ w, h }) => {
        const b = Buffer.from(png);
        b.writeUInt32BE(w, 16);
        b.writeUInt32BE(h, 20);
        return b;
      }),
    fc.uint8Array({ maxLength: 64 }).map((junk) => Buffer.concat([png, Buffer.from(junk)])),
    fc.uint8Array({ maxLength: 256 }).map((b) => Buffer.concat([png.subarray(0, 8), Buffer.from(b)])),
  );
}

/** Values for one field: the right type at the edges, the wrong types, and nonsense. */
const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    0,
    -1,
    1,
    0.5,
    1.5,
    -0.0,
    2 ** 31,
    2 ** 53,
    -(2 ** 53),
    1e308,
    Number.MIN_VALUE,
    '',
    '0',
    'null',
    true,
    false,
    null,
    [],
    {},
    [null],
    'A'.repeat(1000),
  ),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.string({ maxLength: 30 }),
  fc.array(fc.double({ noNaN: true, noDefaultInfinity: true }), { maxLength: 60 }),
  fc.jsonValue({ maxDepth: 3 }),
);

const FIELDS = [
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
  '__proto__',
  'constructor',
  'extra',
];

/** JSON bodies: a valid request with fields changed or removed, and texts JSON.parse may choke on. */
function jsonBody(png: Buffer): fc.Arbitrary<string> {
  const valid = tileRequest(png);
  const edited = fc
    .record({
      set: fc.dictionary(fc.constantFrom(...FIELDS), oddValue, { maxKeys: 3 }),
      drop: fc.subarray(FIELDS.slice(0, 10), { maxLength: 2 }),
      image: fc.option(
        damagedPng(png).map((b) => b.toString('base64')),
        { nil: undefined },
      ),
    })
    .map(({ set, drop, image }) => {
      const body: Record<string, unknown> = { ...valid, ...(image !== undefined && { image_data: image }), ...set };
      for (const key of drop) delete body[key];
      return JSON.stringify(body);
    });
  const text = JSON.stringify(valid);
  return fc.oneof(
    { weight: 6, arbitrary: edited },
    {
      weight: 3,
      arbitrary: damagedPng(png).map((b) => JSON.stringify({ ...valid, image_data: b.toString('base64') })),
    },
    fc.constant(text),
    fc.nat(text.length).map((n) => text.slice(0, n)),
    fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
    fc.constantFrom(
      '1e400',
      '[1e400]',
      '{"x": 1e400}',
      '{"__proto__": {"x": 1}}',
      '{"constructor": {"prototype": {}}}',
      'null',
      '""',
      '{',
      '{}}',
      '\uFEFF{}',
      '{"a":'.repeat(500),
    ),
    fc.string({ maxLength: 200 }),
    fc.constant(text.replace('"x":1024', '"x":1024,"x":"dup"')),
  );
}

/** A value as query text. fc.jsonValue makes objects without a prototype, which String() (and
 *  join) cannot convert: the run of 2026-11-27 09:06 failed on one. */
const asText = (v: unknown) => (v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v));

/** Binary bodies to a model route: the PNG file (maybe damaged) or raw RGB pixels of the right
 *  length or another, the tile's fields in the query with some changed to odd text or left out. */
function binaryRequest(models: string[], png: Buffer): fc.Arbitrary<FuzzRequest> {
  const { image_data: _, ...fields } = tileRequest(png);
  const size = png.readUInt32BE(16) * png.readUInt32BE(20) * 3;
  const text = fc.oneof(
    oddValue.map((v) => (Array.isArray(v) ? v.map(asText).join(',') : asText(v))),
    fc.string({ maxLength: 20 }),
  );
  const query = fc
    .record({
      set: fc.dictionary(fc.constantFrom(...FIELDS.slice(1, 10), 'mode'), text, { maxKeys: 3 }),
      drop: fc.subarray(FIELDS.slice(1, 7), { maxLength: 2 }),
    })
    .map(({ set, drop }) => {
      const params = new URLSearchParams({
        ...Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, String(v)])),
        ...set,
      });
      for (const key of drop) params.delete(key);
      return params.toString();
    });
  const body = fc.oneof(
    fc.record({ type: fc.constant('image/png'), bytes: fc.oneof(fc.constant(png), damagedPng(png)) }),
    fc.record({
      type: fc.constant('application/octet-stream'),
      bytes: fc.oneof(
        fc.constant(Buffer.alloc(size, 200)),
        fc.nat(2 * size).map((n) => Buffer.alloc(n, 7)),
      ),
    }),
  );
  return fc.record({ path: fc.constantFrom(...MODEL_PATHS(models)), query, body }).map(({ path, query, body }) => ({
    method: 'POST',
    path: `${path}?${query}`,
    headers: { 'content-type': body.type, 'content-length': String(body.bytes.length) },
    body: body.bytes,
  }));
}

export function fuzzRequest(models: string[], png: Buffer): fc.Arbitrary<FuzzRequest> {
  return fc.oneof({ weight: 4, arbitrary: anyRequest(models, png) }, binaryRequest(models, png));
}

function anyRequest(models: string[], png: Buffer): fc.Arbitrary<FuzzRequest> {
  const path = fc.oneof(
    { weight: 12, arbitrary: fc.constantFrom(...MODEL_PATHS(models)) },
    fc.constantFrom(...OTHER_PATHS, ...models.map((m) => `/api/metadata/${m}`)),
    fc.webPath(),
    fc.string({ maxLength: 20 }).map((s) => `/api/predict/${encodeURIComponent(s)}`),
  );
  const query = fc.oneof(
    fc.constant(''),
    fc.constantFrom(
      '?mode=prediction',
      '?mode=prediction_with_embedding',
      '?mode=',
      '?mode=x',
      '?mode=prediction&mode=prediction',
      '?categories=usage',
      '?categories=usage,diagnostics',
      '?categories=,',
      '?categories=x',
      '?%ZZ',
      '?a[b]=1',
    ),
    fc.webQueryParameters().map((q) => `?${q}`),
  );
  const body = fc.oneof(
    { weight: 8, arbitrary: jsonBody(png).map((s) => Buffer.from(s)) },
    fc.uint8Array({ maxLength: 512 }).map((b) => Buffer.from(b)),
    fc.constant(null),
  );
  return fc
    .record({
      method: fc.oneof(
        { weight: 8, arbitrary: fc.constant('POST') },
        fc.constantFrom('GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
      ),
      path,
      query,
      contentType: fc.oneof(
        { weight: 6, arbitrary: fc.constant('application/json') },
        fc.constantFrom(...CONTENT_TYPES),
        headerValue,
        fc.constant(undefined),
      ),
      extra: fc.dictionary(
        fc.oneof(
          headerName,
          fc.constantFrom('accept', 'accept-encoding', 'authorization', 'content-encoding', 'x-forwarded-for', 'range'),
        ),
        headerValue,
        { maxKeys: 3 },
      ),
      body,
    })
    .map(({ method, path, query, contentType, extra, body }) => ({
      method,
      path: path + query,
      headers: {
        ...extra,
        ...(contentType !== undefined && { 'content-type': contentType }),
        ...(body && { 'content-length': String(body.length) }),
      },
      body: method === 'GET' || method === 'HEAD' ? null : body,
    }));
}

/** Runs `runs` fuzzed requests against `server`, then checks it is healthy and unharmed. */
export async function fuzzService(t: Test, server: TestServer, models: string[], runs: number): Promise<void> {
  const png = cellularPng(7);
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(fuzzRequest(models, png), async (req) => {
      const { status, body } = await send(server.url, req);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status >= 500) throw new Error(`${status} ${body.slice(0, 300)}`);
    }),
    { numRuns: runs, endOnFailure: true },
  );
  t.pass(`${runs} requests, statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}`);
  t.equal((await server.get('/health/ready')).status, 200, 'ready afterwards');
  const tile = await server.post(`/api/embed/${models.find((m) => m !== 'tissue-seg')}`, tileRequest(png));
  t.equal(tile.status, 200, 'a valid tile is still served');
  const { workers } = (await (await server.get('/diagnostics')).json()) as {
    workers: { id: string; restarts: number }[];
  };
  t.same(
    workers.filter((w) => w.restarts > 0).map((w) => w.id),
    [],
    'no worker restarted',
  );
}
