// The in-process tier: the real HTTP app over a FakeBackend, through fastify.inject (and a real
// socket where the socket is the point). Routes, errors, states, admission, metrics and usage.
import t, { type Test } from 'tap';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { type FakeBackend, fakeService } from './helpers/fake-backend.js';
import { fits } from './helpers/budget.js';
import { cellularPng, fixturePng, tileRequest } from './helpers/tiles.js';
import { ROOT, waitFor } from './helpers/server.js';
import { WINDOW_MS } from '../src/front/pace.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { exampleRequests } from '../tools/examples.js';
import { decodePng } from '../src/tile/png.js';
import { gzipSync } from 'node:zlib';

type Json = Record<string, any>;
const tile224 = cellularPng(3);
const tile512 = fixturePng('he-mixed');

t.test('a tile runs on its model and the response echoes it', async (t) => {
  const { app, backend } = await fakeService();
  const res = await app.inject({
    method: 'POST',
    url: '/api/predict/tissue-seg',
    payload: tileRequest(tile512, { resolution: 8 }),
  });
  t.equal(res.statusCode, 200);
  const body = res.json() as Json;
  t.equal(body.output.length, 512 * 512);
  t.match(body, {
    slide_name: 'slide-001',
    x: 1024,
    y: 2048,
    width: 512,
    height: 512,
    patch_idx: 7,
    resolution: 8,
    embedding: null,
  });
  t.same(
    backend.jobs[0].image,
    { format: 'png', bytes: tile512, loc: ['body', 'image_data'] },
    'the PNG bytes reach the backend as sent',
  );
  const both = (
    await app.inject({
      method: 'POST',
      url: '/api/predict/gene-expr?mode=prediction_with_embedding',
      payload: tileRequest(tile224),
    })
  ).json() as Json;
  t.equal(both.output.length, 21);
  t.equal(both.embedding.length, backend.model('gene-expr')!.info!.manifest.embedding_dim);
  t.match(backend.usage.at(-1), {
    model: 'gene-expr',
    endpoint: 'predict',
    mode: 'prediction_with_embedding',
    status: 200,
    tile: '224x224',
    slide: 'slide-001',
  });
});

t.test('422: every schema error at once, in the pydantic shape; tile checks name the field', async (t) => {
  const { app } = await fakeService();
  const res = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed',
    payload: { image_data: 5, x: 'a', y: 0, width: 224, height: 224, patch_idx: 0 },
  });
  t.equal(res.statusCode, 422);
  const locs = (res.json() as Json).detail.map((d: Json) => d.loc.join('.'));
  t.same(locs.sort(), ['body.image_data', 'body.slide_name', 'body.x'].sort());
  t.equal(res.headers['x-error-code'], 'TILE_ERR_VALIDATION', "the code in a header; the body is the contract's");
  const small = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg', payload: tileRequest(tile224) });
  t.equal(small.statusCode, 422);
  t.match((small.json() as Json).detail[0], { loc: ['body', 'width'], ctx: { expected: '512x512' } });
  const json = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed',
    headers: { 'content-type': 'application/json' },
    payload: '{"x": ',
  });
  t.match(json.json(), { detail: [{ type: 'json_invalid' }] });
  const mode = await app.inject({
    method: 'POST',
    url: '/api/predict/tissue-seg?mode=prediction_with_embedding',
    payload: tileRequest(tile512),
  });
  t.match(mode.json(), { detail: [{ loc: ['query', 'mode'], type: 'literal_error' }] });
});

/** A tile's fields as the query of a binary body. */
const queryOf = (fields: Json) =>
  new URLSearchParams(
    Object.entries(fields).map(([k, v]): [string, string] => [k, Array.isArray(v) ? v.join(',') : String(v)]),
  ).toString();

t.test('binary bodies: the PNG file or raw RGB pixels, the fields in the query, the same answer', async (t) => {
  const { app, backend } = await fakeService();
  const { image_data: _, ...fields } = tileRequest(tile224, {
    resolution: 0.5,
    tissue_ratio: 0.25,
    bulk_rna: Array.from({ length: 50 }, (_, i) => i / 4),
  });
  const rgb = Buffer.from((await decodePng(tile224)).data);
  t.equal(rgb.length, 224 * 224 * 3);
  const answers = [
    await app.inject({
      method: 'POST',
      url: '/api/predict/gene-expr?mode=prediction_with_embedding',
      payload: tileRequest(tile224, fields),
    }),
    await app.inject({
      method: 'POST',
      url: `/api/predict/gene-expr?mode=prediction_with_embedding&${queryOf(fields)}`,
      headers: { 'content-type': 'image/png' },
      payload: tile224,
    }),
    await app.inject({
      method: 'POST',
      url: `/api/predict/gene-expr?${queryOf(fields)}&mode=prediction_with_embedding`,
      headers: { 'content-type': 'application/octet-stream' },
      payload: rgb,
    }),
  ];
  t.same(
    answers.map((a) => a.statusCode),
    [200, 200, 200],
  );
  for (const a of answers)
    t.match(a.json(), {
      slide_name: 'slide-001',
      x: 1024,
      y: 2048,
      width: 224,
      height: 224,
      patch_idx: 7,
      tissue_ratio: 0.25,
      resolution: 0.5,
      embedding: Array,
    });
  t.same(
    backend.jobs.map((j) => [j.image.format, j.image.loc]),
    [
      ['png', ['body', 'image_data']],
      ['png', ['body']],
      ['rgb', ['body']],
    ],
  );
  t.same(
    [backend.jobs[1].image.bytes, backend.jobs[2].image.bytes],
    [tile224, rgb],
    'the body reaches the backend as sent',
  );
  t.ok(
    backend.jobs.every((j, i) => backend.spent[i] === j.image.bytes),
    "each tile's image bytes are given up once answered (src/front/free-bytes.ts)",
  );
  t.same(
    backend.jobs.map((j) => j.bulk),
    [0, 1, 2].map(() => fields.bulk_rna),
    'bulk_rna, comma-separated in the query',
  );
  const embed = await app.inject({
    method: 'POST',
    url: `/api/embed/tile-embed?${queryOf(fields)}`,
    headers: { 'content-type': 'image/png' },
    payload: tile224,
  });
  t.equal(embed.statusCode, 200, 'on /api/embed too');
});

t.test('binary bodies: every error at once, in the pydantic shape, where it was sent', async (t) => {
  const { app } = await fakeService();
  const fields = queryOf({ slide_name: 's', x: 0, y: 0, width: 224, height: 224, patch_idx: 0 });
  const post = (url: string, type: string, payload: Buffer) =>
    app.inject({ method: 'POST', url, headers: { 'content-type': type }, payload });
  const query = await post(
    '/api/predict/gene-expr?mode=bogus&x=abc&width=224.5&bulk_rna=1,a&tissue_ratio=2',
    'application/octet-stream',
    Buffer.alloc(10),
  );
  t.equal(query.statusCode, 422);
  t.same(
    (query.json() as Json).detail.map((d: Json) => [d.loc.join('.'), d.type]),
    [
      ['query.mode', 'literal_error'],
      ['query.slide_name', 'missing'],
      ['query.y', 'missing'],
      ['query.height', 'missing'],
      ['query.patch_idx', 'missing'],
      ['query.x', 'int_parsing'],
      ['query.width', 'int_parsing'],
      ['query.bulk_rna.1', 'float_parsing'],
      ['query.tissue_ratio', 'less_than_equal'],
    ],
  );
  t.match((query.json() as Json).detail[5], {
    msg: 'Input should be a valid integer, unable to parse string as an integer',
    input: 'abc',
  });
  const short = await post(
    `/api/embed/tile-embed?${fields}&resolution=2`,
    'application/octet-stream',
    Buffer.alloc(224 * 224 * 3 - 1),
  );
  t.same(
    (short.json() as Json).detail.map((d: Json) => [d.loc, d.type]),
    [
      [['query', 'resolution'], 'value_error'],
      [['body'], 'value_error'],
    ],
  );
  t.match((short.json() as Json).detail[1].msg, /224x224x3 = 150528 bytes .*got 150527/);
  const notPng = await post(`/api/embed/tile-embed?${fields}`, 'image/png', Buffer.from('GIF89a'));
  t.match(notPng.json(), { detail: [{ loc: ['body'], msg: /the body should be a PNG/ }] });
  const wrongSize = await post(`/api/predict/tissue-seg?${fields}`, 'image/png', tile224);
  t.same(
    (wrongSize.json() as Json).detail.map((d: Json) => d.loc.join('.')),
    ['query.width'],
    'the model takes 512x512 tiles',
  );
  const huge = Buffer.from(tile224);
  huge.writeUInt32BE(1 << 20, 16);
  t.match(
    (await post(`/api/embed/tile-embed?${fields}`, 'image/png', huge)).json(),
    { detail: [{ loc: ['body'] }] },
    'a PNG header is checked before anything inflates it',
  );
});

t.test('binary bodies: the body limit, and admission before the body', async (t) => {
  const { app, backend } = await fakeService({ body_limit_bytes: 4096 });
  const res = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed?slide_name=s',
    headers: { 'content-type': 'application/octet-stream' },
    payload: Buffer.alloc(224 * 224 * 3),
  });
  t.equal(res.statusCode, 413);
  t.type((res.json() as Json).detail, 'string');
  backend.setState('tile-embed', 'loading');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
  socket.write(
    'POST /api/embed/tile-embed?slide_name=s HTTP/1.1\r\nhost: x\r\ncontent-type: image/png\r\ncontent-length: 10000000\r\n\r\n',
  );
  const answer = await new Promise<string>((resolve) => socket.once('data', (d) => resolve(d.toString())));
  socket.destroy();
  t.match(answer, /^HTTP\/1\.1 503/);
});

t.test('Accept: application/octet-stream answers the output tensor, its dtype and shape in headers', async (t) => {
  const { app } = await fakeService();
  const post = (url: string, accept: string | undefined, payload: Json) =>
    app.inject({ method: 'POST', url, headers: accept ? { accept } : {}, payload });
  const mask = await post('/api/predict/tissue-seg', undefined, tileRequest(tile512, { resolution: 8 }));
  const maskBytes = await post(
    '/api/predict/tissue-seg',
    'application/octet-stream',
    tileRequest(tile512, { resolution: 8 }),
  );
  t.equal(maskBytes.statusCode, 200);
  t.same(
    [
      maskBytes.headers['content-type'],
      maskBytes.headers['x-tensor-dtype'],
      maskBytes.headers['x-tensor-shape'],
      Number(maskBytes.headers['x-tissue-ratio']),
      maskBytes.headers.vary,
    ],
    ['application/octet-stream', 'uint8', '512,512', (mask.json() as Json).tissue_ratio, 'accept'],
  );
  t.same([...maskBytes.rawPayload], (mask.json() as Json).output, 'the mask, one byte per pixel, row-major');
  const values = await post(
    '/api/predict/gene-expr',
    'application/json;q=0.5, application/octet-stream',
    tileRequest(tile224),
  );
  t.same(
    [values.headers['x-tensor-dtype'], values.headers['x-tensor-shape'], values.headers['x-tissue-ratio']],
    ['float32', '21', undefined],
  );
  const floats = new Float32Array(
    values.rawPayload.buffer.slice(
      values.rawPayload.byteOffset,
      values.rawPayload.byteOffset + values.rawPayload.length,
    ),
  );
  t.same(
    [...floats],
    (await post('/api/predict/gene-expr', undefined, tileRequest(tile224))).json().output,
    'float32, little-endian',
  );
  const both = await post(
    '/api/predict/gene-expr?mode=prediction_with_embedding',
    'application/octet-stream',
    tileRequest(tile224),
  );
  t.equal(both.statusCode, 406, 'two tensors have no binary answer');
  t.match(both.json(), { detail: /Accept application\/json/ });
  for (const accept of [
    '*/*',
    'application/json, application/octet-stream;q=0.5',
    'application/octet-stream;q=0',
    'text/html, */*',
  ]) {
    t.match(
      (await post('/api/embed/tile-embed', accept, tileRequest(tile224))).headers['content-type'],
      /^application\/json/,
      `Accept: ${accept} gets JSON`,
    );
  }
  const upper = await post('/api/embed/tile-embed', 'APPLICATION/OCTET-STREAM', tileRequest(tile224));
  t.equal(upper.headers['content-type'], 'application/octet-stream', 'media types match whatever their case');
  const fallback = await post(
    '/api/predict/gene-expr?mode=prediction_with_embedding',
    'application/octet-stream, application/json;q=0.5',
    tileRequest(tile224),
  );
  t.equal(fallback.statusCode, 200, 'where the tensor is impossible, JSON when Accept admits it');
  t.match(fallback.headers['content-type'], /^application\/json/);
});

t.test('numbers beyond 2^53 and broken percent-encoding are 422s naming the field', async (t) => {
  const { app } = await fakeService();
  const body = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed',
    payload: JSON.stringify(tileRequest(tile224)).replace('"x":1024', '"x":9007199254740993'),
  });
  t.equal(body.statusCode, 422, 'x = 2^53 + 1 in a body');
  t.match(body.json(), { detail: [{ loc: ['body', 'x'] }] });
  const huge = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed',
    payload: { ...tileRequest(tile224), y: 1e23 },
  });
  t.match(huge.json(), { detail: [{ loc: ['body', 'y'] }] }, '1e23 is not echoed as 1e+23');
  const raw = Buffer.alloc(224 * 224 * 3);
  const query = (q: string) =>
    app.inject({
      method: 'POST',
      url: `/api/embed/tile-embed?${q}`,
      headers: { 'content-type': 'application/octet-stream' },
      payload: raw,
    });
  const base = 'slide_name=s&y=0&width=224&height=224&patch_idx=0';
  t.equal((await query(`${base}&x=0`)).statusCode, 200, 'a binary tile with its fields in the query');
  const big = await query(`${base}&x=9007199254740993`);
  t.equal(big.statusCode, 422, 'x = 2^53 + 1 in a query');
  t.match(big.json(), { detail: [{ loc: ['query', 'x'] }] });
  for (const bad of ['%zz', '%', '%FF']) {
    const res = await query(`${base}&x=0&slide_name=a${bad}`);
    t.equal(res.statusCode, 422, `invalid percent-encoding (${bad})`);
    t.match(res.json(), { detail: [{ loc: ['query'], type: 'value_error' }] });
  }
});

t.test('503s: loading, failed with its reason, queue full; each with Retry-After', async (t) => {
  const { app, backend } = await fakeService({
    pressure: { retry_after_s: 7 },
    models: [{ name: 'tissue-seg' }, { name: 'gene-expr', max_queue: 1 }, { name: 'tile-embed' }],
  });
  backend.setState('tissue-seg', 'loading');
  const loading = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg', payload: tileRequest(tile512) });
  t.equal(loading.statusCode, 503);
  t.same(loading.json(), { status: 'loading' });
  t.equal(loading.headers['x-error-code'], 'TILE_ERR_MODEL_LOADING');
  t.equal(loading.headers['retry-after'], '7');
  backend.setState(
    'tile-embed',
    'failed',
    'manifest.json: tasks.0: must be one of segmentation, prediction, embedding',
  );
  const failed = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
  t.equal(failed.statusCode, 503);
  t.same(failed.json(), {
    detail:
      'model tile-embed failed to load: manifest.json: tasks.0: must be one of segmentation, prediction, embedding',
  });
  t.equal(failed.headers['retry-after'], '7');
  t.equal(failed.headers['x-error-code'], 'TILE_ERR_MODEL_FAILED');
  t.equal((await app.inject('/api/metadata/tile-embed')).statusCode, 503);

  let open!: () => void;
  backend.gate = new Promise((resolve) => (open = resolve));
  const first = app.inject({ method: 'POST', url: '/api/predict/gene-expr', payload: tileRequest(tile224) });
  await waitFor(() => backend.jobs.length === 1);
  const full = await app.inject({ method: 'POST', url: '/api/predict/gene-expr', payload: tileRequest(tile224) });
  t.equal(full.statusCode, 503);
  t.match(full.json(), {
    detail: /gene-expr cannot take the request: 1 tiles outstanding on this front: its share of max_queue \(1\)/,
  });
  t.equal(full.headers['x-error-code'], 'TILE_ERR_QUEUE_FULL');
  open();
  t.equal((await first).statusCode, 200);
  t.equal(backend.queued('gene-expr'), 0, 'the place is given back');
});

t.test('a request that cannot be served is answered before its body is read', async (t) => {
  const { app, backend } = await fakeService();
  backend.setState('gene-expr', 'loading');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;
  const socket = connect(port, '127.0.0.1');
  // Headers announcing 10 MB, and no body at all.
  socket.write(
    'POST /api/predict/gene-expr HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n',
  );
  const answer = await new Promise<string>((resolve) => socket.once('data', (d) => resolve(d.toString())));
  socket.destroy();
  t.match(answer, /^HTTP\/1\.1 503/);
  t.match(answer, /\{"status":"loading"\}/);
});

t.test('health: whole service, per model, failed models apart, strict or not, draining', async (t) => {
  const { app, backend } = await fakeService();
  t.match((await app.inject('/health/ready')).json(), { status: 'ready', failed: [], not_ready: [] });
  backend.setState('tile-embed', 'failed', 'bad graph');
  const strict = await app.inject('/health/ready');
  t.equal(strict.statusCode, 503);
  t.match(strict.json(), {
    status: 'not_ready',
    failed: ['tile-embed'],
    models: { 'tile-embed': 'failed', 'gene-expr': 'ready' },
  });
  t.same((await app.inject('/health/ready/tile-embed')).json(), {
    model: 'tile-embed',
    status: 'failed',
    reason: 'bad graph',
  });
  t.equal((await app.inject('/health/ready/gene-expr')).statusCode, 200);
  t.match((await app.inject('/health/ready/nope')).json(), {
    detail: /enabled models: tissue-seg, gene-expr, tile-embed/,
  });
  backend.draining = true;
  t.match((await app.inject('/health/ready/gene-expr')).json(), { status: 'draining' });
  t.equal((await app.inject('/health/ready')).statusCode, 503);

  const lenient = await fakeService({ health: { strict_readiness: false } });
  lenient.backend.setState('tile-embed', 'failed', 'bad graph');
  const res = await lenient.app.inject('/health/ready');
  t.equal(res.statusCode, 200, 'a failed model does not hold the others back');
  t.match(res.json(), { status: 'ready', failed: ['tile-embed'] });
});

t.test('finding one’s way: GET /api/models, and 404s under /api name the models', async (t) => {
  const { app } = await fakeService();
  const { models } = (await app.inject('/api/models')).json() as Json;
  t.same(
    models.map((m: Json) => m.name),
    ['tissue-seg', 'gene-expr', 'tile-embed'],
  );
  t.match(models[1], {
    state: 'ready',
    tasks: ['prediction', 'embedding'],
    tile: { width: 224, height: 224, mpp: 0.5 },
    endpoints: ['POST /api/predict/gene-expr', 'POST /api/embed/gene-expr', 'GET /api/metadata/gene-expr'],
  });
  t.same(
    models[1].content_types,
    ['application/json', 'image/png', 'application/octet-stream'],
    'the request bodies it takes',
  );
  const missing = await app.inject({ method: 'POST', url: '/api/predict/gene_expr', payload: {} });
  t.equal(missing.statusCode, 404);
  t.same(missing.json(), { detail: 'Not Found; enabled models: tissue-seg, gene-expr, tile-embed (GET /api/models)' });
  t.equal(missing.headers['x-error-code'], 'TILE_ERR_NOT_FOUND');
});

t.test(
  'HTTP semantics: 405 with Allow for a wrong method, 415 for an encoded body, 431 for huge headers, all in the service shape',
  async (t) => {
    const { app } = await fakeService();
    const get = await app.inject({ method: 'GET', url: '/api/predict/tissue-seg' });
    t.equal(get.statusCode, 405);
    t.equal(get.headers.allow, 'POST');
    t.same(get.json(), { detail: 'Method Not Allowed: /api/predict/tissue-seg takes POST, not GET' });
    const post = await app.inject({ method: 'POST', url: '/health/live?x=1' });
    t.same([post.statusCode, post.headers.allow], [405, 'GET, HEAD'], 'a path with a query string');
    t.same(
      [(await app.inject({ method: 'DELETE', url: '/health/ready/gene-expr' })).headers.allow],
      ['GET, HEAD'],
      'a route with a parameter',
    );
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/predict/gene_expr' })).statusCode,
      404,
      'a path no method has stays a 404',
    );
    // Said before the body is read: none (OPTIONS with a Content-Type) or a malformed one was a 422.
    const options = await app.inject({
      method: 'OPTIONS',
      url: '/api/predict/gene-expr',
      headers: { 'content-type': 'application/json' },
    });
    t.same([options.statusCode, options.headers.allow], [405, 'POST'], 'OPTIONS with a Content-Type and no body');
    const malformed = await app.inject({
      method: 'POST',
      url: '/api/predict/gene_expr',
      headers: { 'content-type': 'application/json' },
      payload: '{"image_data": ',
    });
    t.equal(malformed.statusCode, 404, 'a malformed body to a path not served');
    const missingFile = await app.inject({ method: 'GET', url: '/docs/static/no-such-file.js' });
    t.equal(missingFile.statusCode, 404, 'a file the docs do not have: not a 405 that takes GET, not GET');

    const gzipped = gzipSync(JSON.stringify(tileRequest(tile224)));
    const encoded = await app.inject({
      method: 'POST',
      url: '/api/embed/tile-embed',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      payload: gzipped,
    });
    t.equal(encoded.statusCode, 415);
    t.equal(encoded.headers['accept-encoding'], 'identity');
    t.match(encoded.json(), { detail: /Content-Encoding gzip is not supported/ });
    const identity = await app.inject({
      method: 'POST',
      url: '/api/embed/tile-embed',
      headers: { 'content-type': 'application/json', 'content-encoding': 'identity' },
      payload: tileRequest(tile224),
    });
    t.equal(identity.statusCode, 200, 'identity is no encoding');

    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    socket.write(`GET /api/models?${'a'.repeat(70_000)} HTTP/1.1\r\nhost: x\r\n\r\n`);
    const answer = await new Promise<string>((resolve) => {
      let text = '';
      socket.on('data', (d) => (text += d.toString()));
      socket.on('close', () => resolve(text));
    });
    t.match(answer, /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/);
    t.same(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), {
      detail: "the request's headers, its URL included, are over the limit of 16384 bytes",
    });
  },
);

t.test('what Node answers itself, in the service shape: an Expect it cannot meet (417), CONNECT (501)', async (t) => {
  const { app } = await fakeService();
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  /** Writes `requests` at once, then reads every answer until the server closes or `answers` came
   *  (a keep-alive connection: a miscount waits out its 72 s timeout). */
  const exchange = (requests: Buffer | string, answers = 1) =>
    new Promise<string>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      let text = '';
      const done = () => {
        socket.destroy();
        resolve(text);
      };
      socket.write(requests, () =>
        socket.on('data', (d) => {
          text += d.toString();
          // A status line follows the body before it with no line break ("}HTTP/1.1 200 OK").
          if ((text.match(/HTTP\/1\.1 \d{3} /g) ?? []).length >= answers && text.endsWith('}')) done();
        }),
      );
      socket.on('close', done);
    });
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4).split('HTTP/1.1')[0]);
  // A client that sends its 4 MB body with the headers and reads only when it has written it all,
  // then another request on the same connection: the 417 reaches it, and so does the next answer.
  const body = Buffer.alloc(4 << 20, 'x');
  const expect = await exchange(
    Buffer.concat([
      Buffer.from(
        `POST /api/predict/tissue-seg HTTP/1.1\r\nhost: x\r\nexpect: 999-bogus\r\ncontent-length: ${body.length}\r\n\r\n`,
      ),
      body,
      Buffer.from('GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n'),
    ]),
    2,
  );
  t.match(expect, /^HTTP\/1\.1 417 Expectation Failed\r\n/);
  t.match(expect, /\r\nx-error-code: TILE_ERR_EXPECTATION_FAILED\r\n/i);
  t.match(bodyOf(expect), {
    detail: /Expect: 999-bogus cannot be met; the only expectation HTTP defines is 100-continue/,
  });
  t.match(expect, /\r\n\r\nHTTP\/1\.1 200 OK\r\n|}HTTP\/1\.1 200 OK\r\n/, 'the connection serves on');
  const tunnel = await exchange('CONNECT example.org:443 HTTP/1.1\r\nhost: example.org:443\r\n\r\n');
  t.match(tunnel, /^HTTP\/1\.1 501 Not Implemented\r\n/);
  t.match(tunnel, /\r\nX-Error-Code: TILE_ERR_NOT_IMPLEMENTED\r\n/);
  t.same(bodyOf(tunnel), { detail: 'CONNECT example.org:443: this service is not a proxy and opens no tunnel' });
  const next = await exchange('GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n');
  t.match(next, /^HTTP\/1\.1 200 OK\r\n/, 'and the server serves new connections');
});

t.test('a body carrying __proto__ or constructor keys is served without them, polluting nothing', async (t) => {
  const { app } = await fakeService();
  const body = JSON.stringify(tileRequest(tile224)).replace(
    /^\{/,
    '{"__proto__": {"polluted": 1}, "constructor": {"prototype": {"polluted": 1}}, ',
  );
  const res = await app.inject({
    method: 'POST',
    url: '/api/embed/tile-embed',
    headers: { 'content-type': 'application/json' },
    payload: body,
  });
  t.equal(res.statusCode, 200);
  t.equal(({} as Record<string, unknown>).polluted, undefined);
});

t.test('bodies over the limit are 413 in the service shape', async (t) => {
  const { app } = await fakeService({ body_limit_bytes: 4096 });
  const res = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
  t.equal(res.statusCode, 413);
  t.type((res.json() as Json).detail, 'string');
  t.equal(res.headers['x-error-code'], 'FST_ERR_CTP_BODY_TOO_LARGE', "fastify's own code");
});

t.test('admin_token: /metrics and /diagnostics answer 401 without the bearer token', async (t) => {
  const { app } = await fakeService({ admin_token: 'secret' });
  for (const url of ['/metrics', '/diagnostics']) {
    const refused = await app.inject(url);
    t.equal(refused.statusCode, 401, url);
    t.same(refused.json(), { detail: 'Not authenticated' });
    t.equal(refused.headers['www-authenticate'], 'Bearer');
    t.equal(refused.headers['x-error-code'], 'TILE_ERR_UNAUTHORIZED');
  }
  t.equal((await app.inject({ url: '/metrics', headers: { authorization: 'Bearer secret' } })).statusCode, 200);
});

t.test(
  'during a stop, a request still arriving gets the service 503 with Retry-After; those in flight finish',
  async (t) => {
    const { app, backend } = await fakeService();
    let open!: () => void;
    backend.gate = new Promise((resolve) => (open = resolve));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    const url = `http://127.0.0.1:${port}/api/embed/tile-embed`;
    const inFlight = fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(tileRequest(tile224)),
    });
    await waitFor(() => backend.jobs.length === 1);
    // A request whose headers are still arriving when the stop begins.
    const socket = connect(port, '127.0.0.1');
    const body = JSON.stringify(tileRequest(tile224));
    socket.write(`POST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\n`);
    await new Promise((r) => setTimeout(r, 100));
    const closing = app.close();
    socket.write(`content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    const late = await new Promise<string>((resolve) => socket.once('data', (d) => resolve(d.toString())));
    socket.destroy();
    t.match(late, /^HTTP\/1\.1 503/);
    t.match(late, /retry-after: \d+/i);
    t.match(late, /"detail":"the service is shutting down/);
    open();
    t.equal((await inFlight).status, 200);
    await closing;
  },
);

t.test('no pressure 503 in the first moments after start', async (t) => {
  const { app } = await fakeService({ pressure: { max_event_loop_delay_ms: 1 } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;
  const res = await fetch(`http://127.0.0.1:${port}/api/embed/tile-embed`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(tileRequest(tile224)),
  });
  t.equal(res.status, 200);
  t.equal((await fetch(`http://127.0.0.1:${port}/health/ready`)).status, 200);
});

t.test('/metrics counts what was served, by model, endpoint and status', async (t) => {
  const { app, backend } = await fakeService();
  for (let i = 0; i < 3; i++)
    await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
  backend.setState('gene-expr', 'loading');
  await app.inject({ method: 'POST', url: '/api/predict/gene-expr', payload: tileRequest(tile224) });
  const text = (await app.inject('/metrics')).body;
  t.match(text, /tile_requests_total\{model="tile-embed",endpoint="embed",status="200"\} 3\n/);
  t.match(text, /tile_requests_total\{model="gene-expr",endpoint="predict",status="503"\} 1\n/);
  t.match(text, /tile_stage_seconds_count\{model="tile-embed",stage="inference"\} 3\n/);
  t.match(text, /worker_up\{model="gene-expr",instance="0"\} 0\n/);
  t.match(text, /model_queue_depth\{model="tile-embed"\} 0\n/);
});

t.test('OpenAPI lists every answer a model route can give', async (t) => {
  const { app } = await fakeService();
  const doc = (await app.inject('/openapi.json')).json() as Json;
  const post = doc.paths['/api/predict/gene-expr'].post;
  t.same(Object.keys(post.responses).sort(), ['200', '404', '406', '413', '415', '422', '500', '503', '504']);
  t.same(
    Object.keys(post.responses['200'].content),
    ['application/json', 'application/octet-stream'],
    'JSON, or the output tensor',
  );
  t.ok(doc.paths['/api/models'] && doc.paths['/health/ready/{model}']);
  t.match(post.description, /224x224 px tiles at 0\.5 MPP .*21 values, one per gene: .*ESR1.*bulk_rna.*50 counts/s);
  t.match(doc.paths['/api/predict/tissue-seg'].post.description, /512x512 px tiles at 8 MPP .*262144 values of 0 or 1/);
  // The example each route shows is one that works when sent from the page.
  for (const path of [
    '/api/predict/tissue-seg',
    '/api/predict/gene-expr',
    '/api/embed/gene-expr',
    '/api/embed/tile-embed',
  ]) {
    const example = doc.paths[path].post.requestBody.content['application/json'].example;
    const res = await app.inject({ method: 'POST', url: path, payload: example });
    t.equal(res.statusCode, 200, `${path}: the documented example is served`);
  }
});

t.test('the README examples pass every check of their model, and are what examples:build makes', async (t) => {
  const { app } = await fakeService();
  const paths: Record<string, string> = {
    'tissue-seg': '/api/predict/tissue-seg',
    'gene-expr': '/api/predict/gene-expr?mode=prediction_with_embedding',
    'tile-embed': '/api/embed/tile-embed',
  };
  t.same(Object.keys(exampleRequests()).sort(), Object.keys(paths).sort(), 'an example for every model');
  for (const [model, rebuilt] of Object.entries(exampleRequests())) {
    const committed = JSON.parse(readFileSync(join(ROOT, 'examples', `${model}.json`), 'utf8'));
    t.same(committed, rebuilt, `examples/${model}.json is reproducible`);
    t.equal(
      (await app.inject({ method: 'POST', url: paths[model], payload: committed })).statusCode,
      200,
      `examples/${model}.json is served`,
    );
  }
});

t.test(
  'every request the OpenAPI document offers is served: each body type, each mode, with its examples',
  async (t) => {
    const { app } = await fakeService();
    const doc = (await app.inject('/openapi.json')).json() as Json;
    let sent = 0;
    for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
      const body = item.post?.requestBody;
      if (!body) continue;
      const parameters: Json[] = item.post.parameters ?? [];
      const modes: (string | undefined)[] = parameters.find((p) => p.name === 'mode')?.schema.enum ?? [undefined];
      const example = body.content['application/json'].example;
      const png = Buffer.from(example.image_data, 'base64');
      const payloads: Record<string, Buffer | Json> = {
        'application/json': example,
        'image/png': png,
        'application/octet-stream': Buffer.from((await decodePng(png)).data),
      };
      const fields = parameters
        .filter((p) => p.name !== 'mode' && p.example !== undefined)
        .map((p) => `${p.name}=${encodeURIComponent(p.example)}`);
      for (const mode of modes) {
        for (const type of Object.keys(body.content)) {
          const query = [...(mode ? [`mode=${mode}`] : []), ...(type === 'application/json' ? [] : fields)].join('&');
          const res = await app.inject({
            method: 'POST',
            url: `${path}?${query}`,
            headers: { 'content-type': type },
            payload: payloads[type],
          });
          t.equal(
            res.statusCode,
            200,
            `${type} to ${path}?${query}: ${res.statusCode === 200 ? 'served' : res.body.slice(0, 300)}`,
          );
          sent++;
        }
      }
    }
    t.equal(
      sent,
      3 * (1 + 2 + 1 + 1),
      'three body types for each of tissue-seg, gene-expr (two modes), its embed and tile-embed',
    );
  },
);

t.test('a path with a bad percent-escape is a 400 in the service shape, under /v2 the protocol one', async (t) => {
  const { app } = await fakeService();
  const contract = await app.inject({ method: 'POST', url: '/api/predict/%ff' });
  t.equal(contract.statusCode, 400);
  t.equal(contract.headers['x-error-code'], 'TILE_ERR_BAD_REQUEST');
  t.match(contract.json(), { detail: /malformed HTTP request: .*not a valid url component/ });
  const v2 = await app.inject({ method: 'POST', url: '/v2/models/%ff/infer' });
  t.equal(v2.statusCode, 400);
  t.equal(v2.headers['x-error-code'], 'TILE_ERR_BAD_REQUEST');
  t.match(v2.json(), { error: /malformed HTTP request/ });
});

/** A service with a byte budget of `budget`, listening, whose GET /big answers 32 MB. */
async function bigAnswers(t: Test, budget: number) {
  const { app, backend } = await fakeService({ front: { max_inflight_bytes: budget } });
  const answer = Buffer.alloc(32 << 20);
  app.get('/big', async () => answer);
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return { backend, port: (app.server.address() as AddressInfo).port };
}

/** A tile-embed request as it goes on the wire, to pipeline on a raw connection. */
const TILE_REQUEST = (() => {
  const body = JSON.stringify(tileRequest(cellularPng(1), { slide_name: 's' }));
  return `POST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
})();

/** A connection that sends `request` (raw HTTP/1.1) and keeps what it reads, as text, until it
 *  closes. */
function rawClient(port: number, request: string) {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  const state = { socket, closed: false, text: '' };
  socket.once('close', () => (state.closed = true));
  socket.on('data', (chunk: Buffer) => (state.text += chunk.toString('latin1')));
  socket.write(request);
  return state;
}

/** Holds the backend's tiles at their model until the returned call. */
function gate(backend: FakeBackend): () => void {
  let run!: () => void;
  backend.gate = new Promise((resolve) => (run = resolve));
  return run;
}

t.test('an answer its client does not take holds the budget, and is let go after the body timeout', async (t) => {
  const budget = 128 << 20;
  const { app, backend } = await fakeService({
    front: { max_inflight_bytes: budget, body_timeout_ms: 300, headers_timeout_ms: 300 },
  });
  // 64 MB: past what the kernel's socket buffers take from a client that reads nothing.
  const answer = Buffer.alloc(64 << 20);
  app.get('/big', async () => answer);
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
  socket.on('error', () => {});
  const started = performance.now();
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now() - started)));
  socket.write('GET /big HTTP/1.1\r\nhost: x\r\n\r\n');
  socket.pause(); // reads nothing
  await new Promise((resolve) => setTimeout(resolve, 100));
  const probe = backend.requestBytes();
  t.throws(
    () => probe.received(budget - answer.length + 1),
    /front/i,
    'the untaken answer holds its 64 MB of the budget',
  );
  probe.release();
  // A paused socket does not see its end: read once the timeout has passed.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  let received = 0;
  socket.on('data', (chunk: Buffer) => (received += chunk.length));
  socket.resume();
  const ms = await Promise.race([closed, new Promise<number>((resolve) => setTimeout(() => resolve(-1), 10_000))]);
  t.ok(ms > 0 && received < answer.length, `closed by the front after ${received} of ${answer.length} bytes`);
  const whole = backend.requestBytes();
  t.doesNotThrow(() => whole.received(budget), 'the budget is whole again');
  whole.release();
});

t.test(
  'an answer whose client falls behind its pace gives way when the budget is needed; one taken comes whole',
  async (t) => {
    const budget = 256 << 20;
    const { app, backend } = await fakeService({ front: { max_inflight_bytes: budget } });
    const answer = Buffer.alloc(128 << 20);
    for (let i = 0; i < answer.length; i += 4096) answer[i] = i / 4096;
    app.get('/big', async () => answer);
    app.get('/mid', async () => answer.subarray(0, 1 << 20));
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const port = (app.server.address() as AddressInfo).port;
    // Written in pieces, an answer keeps its length and bytes, and its connection stays open.
    const taken = await fetch(`http://127.0.0.1:${port}/big`);
    t.equal(taken.headers.get('content-length'), String(answer.length));
    t.ok(Buffer.from(await taken.arrayBuffer()).equals(answer), 'the 128 MB answer, whole');
    const twice = connect(port, '127.0.0.1');
    let text = '';
    twice.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    twice.write('GET /mid HTTP/1.1\r\nhost: x\r\n\r\nGET /mid HTTP/1.1\r\nhost: x\r\n\r\n');
    await waitFor(() => text.length >= 2 * (1 << 20), 20000);
    t.equal((text.match(/HTTP\/1\.1 200 OK\r\n/g) ?? []).length, 2, 'two 1 MB answers on one connection');
    t.equal((text.match(/content-length: 1048576\r\n/gi) ?? []).length, 2);
    twice.destroy();
    // Two clients behind their pace: one that takes nothing (the body timeout is a minute), and one
    // that stopped reading and then makes up for it.
    const request = () => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      const client = { socket, closed: false, received: 0 };
      socket.once('close', () => (client.closed = true));
      socket.on('data', (chunk: Buffer) => (client.received += chunk.length));
      socket.write('GET /big HTTP/1.1\r\nhost: x\r\n\r\n');
      return client;
    };
    const stalled = request();
    stalled.socket.pause();
    const resumed = request();
    await waitFor(() => resumed.received > 8 << 20, 5000);
    resumed.socket.pause();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const probe = backend.requestBytes();
    const room = budget - answer.length; // once one of them has gone
    t.throws(() => probe.received(room), /front/i, 'within their window both keep their place');
    backend.ahead = WINDOW_MS + 1;
    resumed.socket.resume();
    // Past what the kernel's buffers held for it (a receive buffer may grow to 32 MB here): its
    // answer's pieces have moved since.
    await waitFor(() => resumed.received > 72 << 20, 5000);
    resumed.socket.pause(); // and stops again, with its time made up: its answer stays held
    t.doesNotThrow(
      () => probe.received(room),
      'past it, the one still behind gives way to a request that needs the room',
    );
    t.throws(() => backend.requestBytes().received(1), /front/i, 'the one that made up its time keeps its place');
    probe.release();
    stalled.socket.resume(); // a paused socket does not see its end
    resumed.socket.resume();
    await waitFor(() => stalled.closed && resumed.closed === false && resumed.received > answer.length, 5000);
    t.ok(stalled.received < answer.length, `the stalled one's connection closed after ${stalled.received} bytes`);
    t.notOk(resumed.closed, 'the one that made up for its pause took its answer whole, its connection open');
    resumed.socket.destroy();
  },
);

t.test('an upload whose client stops sending gives way when the budget is needed', async (t) => {
  const budget = 4 << 20;
  const { app, backend } = await fakeService({ body_limit_bytes: budget, front: { max_inflight_bytes: budget } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
  socket.on('error', () => {});
  let closed = false;
  socket.once('close', () => (closed = true));
  // 3 MB of a 4 MB body, then nothing.
  socket.write(
    'POST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 4000000\r\n\r\n',
  );
  socket.write(`{"image_data": "${'A'.repeat(3_000_000)}`);
  await waitFor(() => {
    const probe = backend.requestBytes();
    try {
      probe.received(budget - 2_999_999);
      return false;
    } catch {
      return true; // its 3 MB have arrived
    } finally {
      probe.release();
    }
  }, 5000);
  backend.ahead = WINDOW_MS + 1;
  const next = backend.requestBytes();
  t.doesNotThrow(() => next.received(budget - 1000), 'behind its pace, the stalled upload gives way');
  next.release();
  await waitFor(() => closed, 5000);
  t.ok(closed, 'its connection closed');
  await waitFor(() => backend.usage.length > 0, 5000);
  t.match(backend.usage, [{ status: 408, shed: 'evicted' }], 'recorded as let go of, not as a client that left');
});

t.test(
  'pipelined answers and a chunked upload that fall behind give way too, and give back all they held',
  async (t) => {
    const budget = 128 << 20;
    // 32 MB answers: past what the kernel's buffers take of the first.
    const { backend, port } = await bigAnswers(t, budget);
    const room = (bytes: number) => fits(backend, bytes);
    // Five answers on one connection that reads nothing: four queued behind the first (RFC 9112
    // 9.3.2: in order), which has the connection; together past the budget.
    const pipelined = connect(port, '127.0.0.1');
    pipelined.on('error', () => {});
    let closed = false;
    pipelined.once('close', () => (closed = true));
    pipelined.write('GET /big HTTP/1.1\r\nhost: x\r\n\r\n'.repeat(5));
    pipelined.pause();
    await waitFor(() => !room(1), 5000);
    t.notOk(room(1), 'within their window they keep their place');
    backend.ahead = WINDOW_MS + 1;
    t.ok(room(budget), 'past it they give way, the answers queued behind the first with it');
    await new Promise((resolve) => setTimeout(resolve, 100));
    t.ok(room(budget), 'and nothing is held once the connection has gone');
    pipelined.resume();
    await waitFor(() => closed, 5000);
    // A chunked body (no Content-Length) that stops.
    backend.ahead = 0;
    const chunked = connect(port, '127.0.0.1');
    chunked.on('error', () => {});
    let reset = false;
    chunked.once('close', () => (reset = true));
    const part = `{"image_data": "${'A'.repeat(3_000_000)}`;
    chunked.write(
      `POST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${part.length.toString(16)}\r\n${part}\r\n`,
    );
    await waitFor(() => !room(budget - 2_999_999), 5000);
    backend.ahead = WINDOW_MS + 1;
    t.ok(room(budget), 'a stalled chunked upload gives way');
    await waitFor(() => reset, 5000);
    t.ok(reset, 'its connection reset');
  },
);

t.test('answers ready after their client left give back their bytes, and are logged', async (t) => {
  const budget = 64 << 20;
  const { backend, port } = await bigAnswers(t, budget);
  const whole = () => fits(backend, budget);
  const run = gate(backend);
  // One tile alone, and one pipelined behind a 32 MB answer its client does not read; both
  // clients leave while the model works.
  const alone = connect(port, '127.0.0.1');
  const behind = connect(port, '127.0.0.1');
  for (const socket of [alone, behind]) socket.on('error', () => {});
  alone.write(TILE_REQUEST);
  behind.write(`GET /big HTTP/1.1\r\nhost: x\r\n\r\n${TILE_REQUEST}`);
  behind.pause();
  await waitFor(() => backend.jobs.length === 2, 5000);
  alone.destroy();
  behind.destroy();
  await new Promise((resolve) => setTimeout(resolve, 100));
  run();
  // Within their 5 s window: after it, a request needing the room would have evicted them.
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.ok(whole(), 'the budget is whole once the model has answered for clients that left');
  t.equal(backend.usage.length, 2);
  // A tile answered behind a 32 MB answer its client does not read, the client leaving after.
  const answered = connect(port, '127.0.0.1');
  answered.on('error', () => {});
  answered.write(`GET /big HTTP/1.1\r\nhost: x\r\n\r\n${TILE_REQUEST}`);
  answered.pause();
  await waitFor(() => backend.jobs.length === 3, 5000);
  await new Promise((resolve) => setTimeout(resolve, 200));
  answered.destroy();
  await waitFor(() => backend.usage.length === 3, 5000);
  t.match(backend.usage.at(-1), { status: 499, shed: 'cancelled' }, 'its answer never sent, logged so');
  t.ok(whole());
});

t.test('an answer queued behind one its model still works on waits for its turn, not for its client', async (t) => {
  const budget = 96 << 20;
  const { backend, port } = await bigAnswers(t, budget);
  const run = gate(backend);
  const client = (request: string) => rawClient(port, request);
  // One that reads all it is sent and pipelines a 32 MB answer behind a tile, and later one that
  // does not read its 32 MB answer (less far behind, by when it came).
  const pipelining = client(`${TILE_REQUEST}GET /big HTTP/1.1\r\nhost: x\r\n\r\n`);
  await waitFor(() => backend.jobs.length === 1 && !fits(backend, budget - (32 << 20) + 1), 5000);
  await new Promise((resolve) => setTimeout(resolve, 300));
  const stalled = client('GET /big HTTP/1.1\r\nhost: x\r\n\r\n');
  stalled.socket.pause();
  await waitFor(() => !fits(backend, budget - (64 << 20) + 1), 5000);
  // The model takes longer than the window: the answer waiting behind it has taken nothing.
  backend.ahead = WINDOW_MS + 1;
  t.ok(fits(backend, 32 << 20), 'room made');
  stalled.socket.resume(); // a paused socket does not see its end
  await waitFor(() => stalled.closed, 5000);
  t.ok(stalled.closed, 'by the client behind its pace');
  t.notOk(pipelining.closed, 'not by the one whose answer waits for its turn');
  run();
  await waitFor(() => pipelining.text.length > 32 << 20, 10_000);
  t.equal((pipelining.text.match(/HTTP\/1\.1 200 OK\r\n/g) ?? []).length, 2, 'the tile, then the 32 MB answer, whole');
  t.notOk(pipelining.closed);
  pipelining.socket.destroy();
});

t.test('requests on a connection let go of are logged as let go of, those queued behind it too', async (t) => {
  const budget = 128 << 20;
  const { backend, port } = await bigAnswers(t, budget);
  const run = gate(backend);
  // Behind 32 MB answers their clients do not take: a tile answered (queued), and two at their
  // model (Node reads no more requests of a connection whose answers wait).
  const connection = (requests: string) =>
    rawClient(port, `GET /big HTTP/1.1\r\nhost: x\r\n\r\n${requests}`).socket.pause();
  connection(TILE_REQUEST);
  await waitFor(() => backend.jobs.length === 1, 5000);
  run();
  await new Promise((resolve) => setTimeout(resolve, 100));
  backend.gate = new Promise(() => {});
  connection(TILE_REQUEST);
  connection(TILE_REQUEST);
  await waitFor(() => backend.jobs.length === 3, 5000);
  backend.ahead = WINDOW_MS + 1;
  t.ok(fits(backend, budget - (1 << 20)), 'behind their pace, the connections give way');
  await waitFor(() => backend.usage.length === 3, 5000);
  t.match(
    backend.usage,
    [
      { status: 408, shed: 'evicted' },
      { status: 408, shed: 'evicted' },
      { status: 408, shed: 'evicted' },
    ],
    'each tile: the one answered behind its 32 MB, never sent, and those their model worked on',
  );
});

t.test('a pipelined request waiting for its model past the body timeout is not cut off', async (t) => {
  const { app, backend } = await fakeService({ front: { body_timeout_ms: 300, headers_timeout_ms: 300 } });
  let open!: () => void;
  backend.gate = new Promise((resolve) => (open = resolve));
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
  socket.on('error', () => {});
  let text = '';
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
  const body = JSON.stringify(tileRequest(cellularPng(1), { slide_name: 's' }));
  // A health check's answer (taken at once), then a tile that waits 1 s for its model.
  socket.write(
    `GET /health/live HTTP/1.1\r\nhost: x\r\n\r\nPOST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
  );
  setTimeout(() => open(), 1000);
  await waitFor(() => (text.match(/HTTP\/1\.1 200/g) ?? []).length === 2, 5000);
  t.equal((text.match(/HTTP\/1\.1 200/g) ?? []).length, 2, 'both answered on the one connection');
  socket.destroy();
});
