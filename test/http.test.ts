// The in-process tier: the real HTTP app over a FakeBackend, through fastify.inject (and a real
// socket where the socket is the point). Routes, errors, states, admission, metrics and usage.
import t from 'tap';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { fakeService } from './helpers/fake-backend.js';
import { cellularPng, fixturePng, tileRequest } from './helpers/tiles.js';
import { ROOT, waitFor } from './helpers/server.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { exampleRequests } from '../tools/examples.js';

type Json = Record<string, any>;
const tile224 = cellularPng(3);
const tile512 = fixturePng('he-mixed');

t.test('a tile runs on its model and the response echoes it', async (t) => {
  const { app, backend } = await fakeService();
  const res = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg', payload: tileRequest(tile512, { resolution: 8 }) });
  t.equal(res.statusCode, 200);
  const body = res.json() as Json;
  t.equal(body.output.length, 512 * 512);
  t.match(body, { slide_name: 'slide-001', x: 1024, y: 2048, width: 512, height: 512, patch_idx: 7, resolution: 8, embedding: null });
  t.same(backend.jobs[0].image, { format: 'png', bytes: tile512, loc: ['body', 'image_data'] }, 'the PNG bytes reach the backend as sent');
  const both = (await app.inject({ method: 'POST', url: '/api/predict/gene-expr?mode=prediction_with_embedding', payload: tileRequest(tile224) })).json() as Json;
  t.equal(both.output.length, 21);
  t.equal(both.embedding.length, backend.model('gene-expr')!.info!.manifest.embedding_dim);
  t.match(backend.usage.at(-1), { model: 'gene-expr', endpoint: 'predict', mode: 'prediction_with_embedding', status: 200, tile: '224x224', slide: 'slide-001' });
});

t.test('422: every schema error at once, in the pydantic shape; tile checks name the field', async (t) => {
  const { app } = await fakeService();
  const res = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: { image_data: 5, x: 'a', y: 0, width: 224, height: 224, patch_idx: 0 } });
  t.equal(res.statusCode, 422);
  const locs = (res.json() as Json).detail.map((d: Json) => d.loc.join('.'));
  t.same(locs.sort(), ['body.image_data', 'body.slide_name', 'body.x'].sort());
  const small = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg', payload: tileRequest(tile224) });
  t.equal(small.statusCode, 422);
  t.match((small.json() as Json).detail[0], { loc: ['body', 'width'], ctx: { expected: '512x512' } });
  const json = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', headers: { 'content-type': 'application/json' }, payload: '{"x": ' });
  t.match(json.json(), { detail: [{ type: 'json_invalid' }] });
  const mode = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg?mode=prediction_with_embedding', payload: tileRequest(tile512) });
  t.match(mode.json(), { detail: [{ loc: ['query', 'mode'], type: 'literal_error' }] });
});

t.test('503s: loading, failed with its reason, queue full; each with Retry-After', async (t) => {
  const { app, backend } = await fakeService({ pressure: { retry_after_s: 7 }, models: [{ name: 'tissue-seg' }, { name: 'gene-expr', max_queue: 1 }, { name: 'tile-embed' }] });
  backend.setState('tissue-seg', 'loading');
  const loading = await app.inject({ method: 'POST', url: '/api/predict/tissue-seg', payload: tileRequest(tile512) });
  t.equal(loading.statusCode, 503);
  t.same(loading.json(), { status: 'loading' });
  t.equal(loading.headers['retry-after'], '7');
  backend.setState('tile-embed', 'failed', 'manifest.json: tasks.0: must be one of segmentation, prediction, embedding');
  const failed = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
  t.equal(failed.statusCode, 503);
  t.same(failed.json(), { detail: 'model tile-embed failed to load: manifest.json: tasks.0: must be one of segmentation, prediction, embedding' });
  t.equal(failed.headers['retry-after'], '7');
  t.equal((await app.inject('/api/metadata/tile-embed')).statusCode, 503);

  let open!: () => void;
  backend.gate = new Promise((resolve) => (open = resolve));
  const first = app.inject({ method: 'POST', url: '/api/predict/gene-expr', payload: tileRequest(tile224) });
  await waitFor(() => backend.jobs.length === 1);
  const full = await app.inject({ method: 'POST', url: '/api/predict/gene-expr', payload: tileRequest(tile224) });
  t.equal(full.statusCode, 503);
  t.match(full.json(), { detail: /gene-expr has 1 requests outstanding/ });
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
  socket.write('POST /api/predict/gene-expr HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n');
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
  t.match(strict.json(), { status: 'not_ready', failed: ['tile-embed'], models: { 'tile-embed': 'failed', 'gene-expr': 'ready' } });
  t.same((await app.inject('/health/ready/tile-embed')).json(), { model: 'tile-embed', status: 'failed', reason: 'bad graph' });
  t.equal((await app.inject('/health/ready/gene-expr')).statusCode, 200);
  t.match((await app.inject('/health/ready/nope')).json(), { detail: /enabled models: tissue-seg, gene-expr, tile-embed/ });
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
  t.same(models.map((m: Json) => m.name), ['tissue-seg', 'gene-expr', 'tile-embed']);
  t.match(models[1], { state: 'ready', tasks: ['prediction', 'embedding'], tile: { width: 224, height: 224, mpp: 0.5 }, endpoints: ['POST /api/predict/gene-expr', 'POST /api/embed/gene-expr', 'GET /api/metadata/gene-expr'] });
  const missing = await app.inject({ method: 'POST', url: '/api/predict/gene_expr', payload: {} });
  t.equal(missing.statusCode, 404);
  t.same(missing.json(), { detail: 'Not Found; enabled models: tissue-seg, gene-expr, tile-embed (GET /api/models)' });
});

t.test('a body carrying __proto__ or constructor keys is served without them, polluting nothing', async (t) => {
  const { app } = await fakeService();
  const body = JSON.stringify(tileRequest(tile224)).replace(/^\{/, '{"__proto__": {"polluted": 1}, "constructor": {"prototype": {"polluted": 1}}, ');
  const res = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', headers: { 'content-type': 'application/json' }, payload: body });
  t.equal(res.statusCode, 200);
  t.equal(({} as Record<string, unknown>).polluted, undefined);
});

t.test('bodies over the limit are 413 in the service shape', async (t) => {
  const { app } = await fakeService({ body_limit_bytes: 4096 });
  const res = await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
  t.equal(res.statusCode, 413);
  t.type((res.json() as Json).detail, 'string');
});

t.test('during a stop, a request still arriving gets the service 503 with Retry-After; those in flight finish', async (t) => {
  const { app, backend } = await fakeService();
  let open!: () => void;
  backend.gate = new Promise((resolve) => (open = resolve));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}/api/embed/tile-embed`;
  const inFlight = fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(tileRequest(tile224)) });
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
});

t.test('no pressure 503 in the first moments after start', async (t) => {
  const { app } = await fakeService({ pressure: { max_event_loop_delay_ms: 1 } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;
  const res = await fetch(`http://127.0.0.1:${port}/api/embed/tile-embed`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(tileRequest(tile224)) });
  t.equal(res.status, 200);
  t.equal((await fetch(`http://127.0.0.1:${port}/health/ready`)).status, 200);
});

t.test('/metrics counts what was served, by model, endpoint and status', async (t) => {
  const { app, backend } = await fakeService();
  for (let i = 0; i < 3; i++) await app.inject({ method: 'POST', url: '/api/embed/tile-embed', payload: tileRequest(tile224) });
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
  t.same(Object.keys(post.responses).sort(), ['200', '404', '413', '422', '500', '503', '504']);
  t.ok(doc.paths['/api/models'] && doc.paths['/health/ready/{model}']);
  t.match(post.description, /224x224 px tiles at 0\.5 MPP .*21 values, one per gene: .*ESR1.*bulk_rna.*50 counts/s);
  t.match(doc.paths['/api/predict/tissue-seg'].post.description, /512x512 px tiles at 8 MPP .*262144 values of 0 or 1/);
  // The example each route shows is one that works when sent from the page.
  for (const path of ['/api/predict/tissue-seg', '/api/predict/gene-expr', '/api/embed/gene-expr', '/api/embed/tile-embed']) {
    const example = doc.paths[path].post.requestBody.content['application/json'].example;
    const res = await app.inject({ method: 'POST', url: path, payload: example });
    t.equal(res.statusCode, 200, `${path}: the documented example is served`);
  }
});

t.test('the README examples pass every check of their model, and are what examples:build makes', async (t) => {
  const { app } = await fakeService();
  const paths: Record<string, string> = { 'tissue-seg': '/api/predict/tissue-seg', 'gene-expr': '/api/predict/gene-expr?mode=prediction_with_embedding', 'tile-embed': '/api/embed/tile-embed' };
  for (const [model, rebuilt] of Object.entries(exampleRequests())) {
    const committed = JSON.parse(readFileSync(join(ROOT, 'examples', `${model}.json`), 'utf8'));
    t.same(committed, rebuilt, `examples/${model}.json is reproducible`);
    t.equal((await app.inject({ method: 'POST', url: paths[model], payload: committed })).statusCode, 200, `examples/${model}.json is served`);
  }
});
