// The loading state while a model's worker starts, and models removed from the list.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { copyPackage } from '../helpers/packages.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';

const tile = cellularPng(21);

t.test('a slow-loading model answers 503 loading with Retry-After; the others serve', async (t) => {
  // Warm-up runs before the worker reports ready: 150 runs make this load take seconds.
  const slow = copyPackage('gene-expr', (m) => (m.warmup = { iterations: 150 }));
  const server = await startServer({
    models: [{ name: 'gene-expr', path: slow }, { name: 'tile-embed' }],
    waitReady: false,
  });
  t.teardown(() => server.stop());

  const loading = await server.post('/api/predict/gene-expr', tileRequest(tile));
  t.equal(loading.status, 503);
  t.same(await loading.json(), { status: 'loading' });
  t.match(loading.headers.get('retry-after'), /^\d+$/);
  t.equal((await server.get('/api/metadata/gene-expr')).status, 503, 'metadata too');

  await server.waitFor(async () => (await server.post('/api/embed/tile-embed', tileRequest(tile))).status === 200);
  // Readiness agrees with itself whichever moment it is asked: 503 naming gene-expr while it
  // loads, 200 once it is ready.
  const ready = await server.get('/health/ready');
  const body = (await ready.json()) as Record<string, any>;
  const loaded = body.models['gene-expr'] === 'ready';
  t.equal(ready.status, loaded ? 200 : 503);
  t.same(body.not_ready, loaded ? [] : ['gene-expr'], 'readiness names the model still loading');
  t.equal(body.models['tile-embed'], 'ready');
  await server.waitFor(
    async () => (await server.post('/api/predict/gene-expr', tileRequest(tile))).status === 200,
    60000,
  );
  t.equal((await server.get('/health/ready')).status, 200);
});

t.test('a model removed with MODELS has no routes and no worker', async (t) => {
  const server = await startServer({ env: { MODELS: 'tile-embed' } });
  t.teardown(() => server.stop());
  t.equal((await server.post('/api/embed/tile-embed', tileRequest(tile))).status, 200);
  t.equal((await server.post('/api/predict/gene-expr', tileRequest(tile))).status, 404);
  t.equal((await server.post('/api/embed/gene-expr', tileRequest(tile))).status, 404);
  t.equal((await server.get('/api/metadata/tissue-seg')).status, 404);
  const { workers } = (await (await server.get('/diagnostics')).json()) as { workers: { model: string }[] };
  t.same(
    workers.map((w) => w.model),
    ['tile-embed'],
    'only the enabled model has a worker',
  );
  const doc = (await (await server.get('/openapi.json')).json()) as { paths: Record<string, unknown> };
  t.notOk(doc.paths['/api/predict/gene-expr'], 'nor is it documented');
});

t.test('a model removed from the config list is likewise absent', async (t) => {
  const server = await startServer({ models: [{ name: 'gene-expr' }] });
  t.teardown(() => server.stop());
  t.equal((await server.post('/api/predict/tissue-seg', tileRequest(tile))).status, 404);
  t.equal((await server.post('/api/predict/gene-expr', tileRequest(tile))).status, 200);
});

t.test('MODELS naming an unknown model stops the start with a clear message', async (t) => {
  await t.rejects(
    startServer({ env: { MODELS: 'gene-expr,nope' } }),
    /configuration error \[TILE_ERR_CONFIG_UNKNOWN_MODEL\]: MODELS names nope, not in/,
  );
});

t.test(
  'under pressure (here: a heap limit the process is always over) the front answers 503 with Retry-After',
  async (t) => {
    const server = await startServer({
      models: [{ name: 'tile-embed' }],
      config: { pressure: { max_heap_used_bytes: 1024, retry_after_s: 7 } },
      waitReady: false,
    });
    t.teardown(() => server.stop());
    // The guard samples the heap once the front listens; then model routes shed.
    let res!: Response;
    let body!: { detail?: string };
    await server.waitFor(async () => {
      res = await server.post('/api/embed/tile-embed', tileRequest(tile));
      body = (await res.json()) as { detail?: string };
      return res.status === 503 && /under pressure/.test(body.detail ?? '');
    });
    t.equal(res.headers.get('retry-after'), '7');
    t.match(body, { detail: /Service under pressure \(heapUsedBytes/ });
    t.equal(res.headers.get('x-error-code'), 'TILE_ERR_UNDER_PRESSURE');
    // Health checks are exempt: a balancer or systemd must see the truth, not the load.
    t.equal((await server.get('/health/live')).status, 200);
    // Readiness is exempt: it reports the model, so a balancer does not take a busy host out.
    await server.waitFor(async () => (await server.get('/health/ready/tile-embed')).status === 200, 60000);
    t.same(await (await server.get('/health/ready')).json(), {
      status: 'ready',
      models: { 'tile-embed': 'ready' },
      not_ready: [],
      failed: [],
    });
  },
);
