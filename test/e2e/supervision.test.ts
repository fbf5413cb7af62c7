// Chaos with real processes: workers and fronts killed, workers hung or corrupt while requests
// flow (reloads: reload.test.ts). Every service here runs two HTTP fronts (node:cluster), as a multi-core host does.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { load, pidOf, workers, type Json } from '../helpers/load.js';
import { copyPackage, corruptPackage } from '../helpers/packages.js';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';
import { request } from 'node:http';
import { join } from 'node:path';
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from 'undici';

const tile = cellularPng(31);
const fast = {
  restart_initial_delay_ms: 50,
  restart_max_delay_ms: 400,
  heartbeat_interval_ms: 100,
  heartbeat_timeout_ms: 3000,
};
const FRONTS = 2;

t.test('SIGKILL a worker under load: only 200 and 503 loading, then it serves again; others unaffected', async (t) => {
  const server = await startServer({ config: { fronts: FRONTS, supervisor: fast } });
  t.teardown(() => server.stop());
  const gene = load(server, '/api/predict/gene-expr', tile, 8);
  const other = load(server, '/api/embed/tile-embed', tile, 2);
  await new Promise((r) => setTimeout(r, 500));

  const killedAt = Date.now();
  process.kill(await pidOf(server, 'gene-expr#0'), 'SIGKILL');
  await server.waitFor(() => gene.results.some((r) => r.at > killedAt && r.status === 503));
  let servingAgain = 0;
  await server.waitFor(async () => {
    const ok = (await server.post('/api/predict/gene-expr', tileRequest(tile))).status === 200;
    if (ok) servingAgain = Date.now();
    return ok;
  });
  await new Promise((r) => setTimeout(r, 300));
  const geneResults = await gene.stop();
  const otherResults = await other.stop();

  const statuses = new Set(geneResults.map((r) => r.status));
  t.same([...statuses].sort(), [200, 503], 'gene-expr saw only 200 and 503');
  t.ok(
    geneResults.filter((r) => r.status === 503).every((r) => r.body.status === 'loading'),
    'every 503 is {"status": "loading"}',
  );
  t.ok(
    otherResults.length > 0 && otherResults.every((r) => r.status === 200),
    `tile-embed: ${otherResults.length} requests, all 200`,
  );
  t.comment(`worker death to serving again: ${servingAgain - killedAt} ms`);
  const w = (await workers(server)).find((x) => x.id === 'gene-expr#0')!;
  t.equal(w.restarts, 1);
  t.match(w.last_error, /signal SIGKILL/);
});

t.test('a second instance takes over requests in flight when one is killed from outside', async (t) => {
  const server = await startServer({
    models: [{ name: 'gene-expr', instances: 2, max_queue_delay_ms: 5 }],
    config: { fronts: FRONTS, supervisor: fast },
  });
  t.teardown(() => server.stop());
  await server.allWorkersReady();
  const gene = load(server, '/api/predict/gene-expr', tile, 8);
  await new Promise((r) => setTimeout(r, 400));
  process.kill(await pidOf(server, 'gene-expr#1'), 'SIGKILL');
  await new Promise((r) => setTimeout(r, 600));
  const results = await gene.stop();
  t.ok(
    results.every((r) => r.status === 200),
    `${results.length} requests, all 200: retried on the live instance`,
  );
  const served = (await workers(server)).map((w) => w.probe.tiles ?? 0);
  t.ok(served[0] > 0, 'instance 0 served');
});

t.test('least-outstanding routing spreads load over instances', async (t) => {
  const server = await startServer({
    models: [{ name: 'tile-embed', instances: 2, max_queue_delay_ms: 0, max_batch: 1 }],
    config: { fronts: FRONTS },
  });
  t.teardown(() => server.stop());
  await server.allWorkersReady();
  const statuses = await Promise.all(
    Array.from({ length: 24 }, () => server.post('/api/embed/tile-embed', tileRequest(tile)).then((r) => r.status)),
  );
  t.ok(statuses.every((s) => s === 200));
  const tiles = (await workers(server)).map((w) => w.probe.tiles);
  t.ok(tiles[0] >= 6 && tiles[1] >= 6, `both instances served (${tiles.join(' / ')})`);
});

t.test(
  'packages that cannot load are failed, not loading: one line each, 503 with the reason, retried when the files change',
  async (t) => {
    const badGraph = corruptPackage('tissue-seg');
    const badManifest = copyPackage('tile-embed', (m) => (m.tile.mpp = 'half'));
    const server = await startServer({
      models: [
        { name: 'tissue-seg', path: badGraph },
        { name: 'gene-expr' },
        { name: 'tile-embed', path: badManifest },
      ],
      config: { fronts: FRONTS, supervisor: { ...fast, package_poll_ms: 100 } },
      waitReady: false,
    });
    t.teardown(() => server.stop());
    await server.waitFor(
      async () => ((await (await server.get('/health/ready')).json()) as Json).failed.length === 2,
      30000,
    );
    t.equal((await server.post('/api/predict/gene-expr', tileRequest(tile))).status, 200, 'the good model serves');
    const seg = await server.post('/api/predict/tissue-seg', tileRequest(fixturePng('he-mixed')));
    t.equal(seg.status, 503);
    t.match(seg.headers.get('retry-after'), /^\d+$/);
    t.match(await seg.json(), {
      detail:
        /^model tissue-seg failed to load: load failed \[TILE_ERR_MODEL_LOAD\]: .*(protobuf|ONNX|onnx|parse|Load model)/i,
    });
    t.equal(seg.headers.get('x-error-code'), 'TILE_ERR_MODEL_FAILED');
    const failure = (model: string) =>
      server.lines.find((l) => l.model === model && String(l.msg).startsWith('model failed to load'));
    t.equal(
      failure('tissue-seg')?.errorCode,
      'TILE_ERR_MODEL_LOAD',
      'the log has the code: ONNX Runtime could not load the graph',
    );
    t.equal(failure('tile-embed')?.errorCode, 'TILE_ERR_PACKAGE_MANIFEST', 'the manifest');
    const ready = await server.get('/health/ready');
    t.equal(ready.status, 503, 'strict readiness: a failed model keeps the service unready');
    t.match(await ready.json(), {
      status: 'not_ready',
      failed: ['tissue-seg', 'tile-embed'],
      models: { 'gene-expr': 'ready', 'tissue-seg': 'failed' },
    });
    const listed = ((await (await server.get('/api/models')).json()) as Json).models.find(
      (m: Json) => m.name === 'tile-embed',
    );
    t.match(listed, { state: 'failed', reason: /manifest\.json: invalid manifest: tile\.mpp/ });
    // Not re-forked in a loop: one failure, one log line.
    await new Promise((r) => setTimeout(r, 1500));
    const seg0 = (await workers(server)).find((w) => w.id === 'tissue-seg#0')!;
    t.equal(seg0.restarts, 1, 'tried once, then waits');
    t.match(seg0.last_exit, { code: 3 });
    t.ok(seg0.last_exit.stderr_tail.length > 0, 'stderr tail kept');
    t.equal(
      server.lines.filter((l) => l.msg?.toString().startsWith('model failed to load') && l.model === 'tissue-seg')
        .length,
      1,
      'one log line for the state change',
    );
    // The operator fixes the package: the change is noticed and the model loads.
    copyPackage('tissue-seg', undefined, join(badGraph, '..'));
    await server.waitFor(
      async () => (await server.post('/api/predict/tissue-seg', tileRequest(fixturePng('he-mixed')))).status === 200,
      30000,
    );
    t.equal(server.proc.exitCode, null, 'the supervisor keeps running');
  },
);

t.test(
  'a worker hung by a request is killed and replaced; the request gets 503 loading and costs no second worker',
  async (t) => {
    const server = await startServer({
      models: [{ name: 'gene-expr', instances: 2 }],
      config: { fronts: 1, supervisor: fast },
    });
    t.teardown(() => server.stop());
    await server.allWorkersReady();
    // Instance #1 hangs (as on a poison tile). Both instances are paused while two requests go
    // out, so least-outstanding routing gives one to each whatever the timing; then #0 resumes.
    const pid = await pidOf(server, 'gene-expr#1');
    const other = await pidOf(server, 'gene-expr#0');
    process.kill(other, 'SIGSTOP');
    process.kill(pid, 'SIGSTOP');
    const started = Date.now();
    const both = Promise.all([0, 1].map(() => server.post('/api/predict/gene-expr', tileRequest(tile))));
    await server.waitFor(async () =>
      /model_queue_depth\{model="gene-expr"\} 2/.test(await (await server.get('/metrics')).text()),
    );
    process.kill(other, 'SIGCONT');
    const [a, b] = await both;
    t.same([a.status, b.status].sort(), [200, 503], 'the request on the hung worker gets 503, the other 200');
    t.same(await (a.status === 503 ? a : b).json(), { status: 'loading' });
    t.ok(Date.now() - started < 5000, 'answered once the worker was declared hung');
    await server.waitFor(async () => (await server.post('/api/predict/gene-expr', tileRequest(tile))).status === 200);
    const [w0, w1] = await workers(server);
    t.not(w1.pid, pid, 'a new process');
    t.match(w1.last_error, /no heartbeat for \d+ ms; killed/);
    t.equal(w0.pid, other, 'the request was not retried on the other instance, which lives on');
    t.equal(w0.restarts, 0);
  },
);

t.test('past its deadline a request gets 504 and is forgotten', async (t) => {
  const server = await startServer({
    models: [{ name: 'gene-expr', request_timeout_ms: 400 }],
    config: { fronts: FRONTS, supervisor: { heartbeat_timeout_ms: 60000 } },
  });
  t.teardown(() => server.stop());
  const pid = await pidOf(server, 'gene-expr#0');
  process.kill(pid, 'SIGSTOP');
  const started = Date.now();
  const res = await server.post('/api/predict/gene-expr', tileRequest(tile));
  const elapsed = Date.now() - started;
  process.kill(pid, 'SIGCONT');
  t.equal(res.status, 504);
  t.match(await res.json(), { detail: /did not answer within the 400 ms request deadline/ });
  t.equal(res.headers.get('x-error-code'), 'TILE_ERR_DEADLINE');
  t.ok(elapsed >= 380 && elapsed < 3000, `answered after ${elapsed} ms`);
  t.equal(
    (await server.post('/api/predict/gene-expr', tileRequest(tile))).status,
    200,
    'the worker serves on; the late answer is dropped',
  );
  t.match(await (await server.get('/metrics')).text(), /model_queue_depth\{model="gene-expr"\} 0/, 'nothing held');
});

t.test('a full queue answers 503 with Retry-After instead of growing', async (t) => {
  const server = await startServer({ models: [{ name: 'gene-expr', max_queue: 4 }], config: { fronts: FRONTS } });
  t.teardown(() => server.stop());
  const responses = await Promise.all(
    Array.from({ length: 30 }, () => server.post('/api/predict/gene-expr', tileRequest(tile))),
  );
  const full = responses.filter((r) => r.status === 503);
  t.ok(full.length > 0, `${full.length} of 30 refused`);
  t.ok(responses.every((r) => r.status === 200 || r.status === 503));
  // Refused by a front (past the places it may hold) or, when fronts admitted on the same load
  // report, by the instance (past its part of max_queue).
  t.match(await full[0].json(), {
    detail: /\d+ tiles outstanding on this front: its share of max_queue \(2\)|its instance holds 4 of its 4 tiles/,
  });
  t.match(full[0].headers.get('retry-after'), /^\d+$/);
  t.equal(full[0].headers.get('x-error-code'), 'TILE_ERR_QUEUE_FULL');
});

t.test('SIGTERM with requests in flight: all complete, then exit 0', async (t) => {
  const server = await startServer({
    models: [{ name: 'gene-expr' }, { name: 'tile-embed' }],
    config: { fronts: FRONTS },
  });
  // Hold the requests in flight: the gene-expr worker is paused until after the SIGTERM.
  const pid = await pidOf(server, 'gene-expr#0');
  process.kill(pid, 'SIGSTOP');
  // Only requests the server has accepted are in flight: wait until all 16 are in the queue (a
  // request still being written on a keep-alive connection when the server closes is not).
  const inFlight = Array.from({ length: 16 }, () => server.post('/api/predict/gene-expr', tileRequest(tile)));
  await server.waitFor(async () =>
    /model_queue_depth\{model="gene-expr"\} 16/.test(await (await server.get('/metrics')).text()),
  );
  const started = Date.now();
  const code = server.stop('SIGTERM');
  setTimeout(() => process.kill(pid, 'SIGCONT'), 300);
  const statuses = await Promise.all(inFlight.map((p) => p.then((r) => r.status)));
  t.same(statuses, new Array(16).fill(200), 'every request in flight completed');
  t.equal(await code, 0, 'exit 0');
  t.ok(Date.now() - started < 5000, `stopped in ${Date.now() - started} ms`);
  t.ok(server.lines.some((l) => l.msg === 'stopped'));
});

t.test('SIGKILL an HTTP front under load: it is replaced; requests on the other front never notice', async (t) => {
  const server = await startServer({
    models: [{ name: 'gene-expr' }, { name: 'tile-embed' }],
    config: { fronts: FRONTS, supervisor: fast },
  });
  t.teardown(() => server.stop());
  const fronts = () => server.lines.filter((l) => /Server listening/.test(String(l.msg))).map((l) => l.pid as number);
  await server.waitFor(() => fronts().length === FRONTS);
  const concurrency = 8;
  // At most one connection per request loop, so that "one lost request per connection" is a bound.
  const dispatcher = getGlobalDispatcher();
  setGlobalDispatcher(new Agent({ connections: concurrency }));
  t.teardown(() => setGlobalDispatcher(dispatcher));
  const gene = load(server, '/api/predict/gene-expr', tile, concurrency);
  await new Promise((r) => setTimeout(r, 800));
  const killedAt = Date.now();
  process.kill(fronts()[0], 'SIGKILL');
  await server.waitFor(() => fronts().length === FRONTS + 1, 20000);
  await new Promise((r) => setTimeout(r, 800));
  const results = await gene.stop();
  const answered = results.filter((r) => r.status !== 0);
  const dropped = results.filter((r) => r.status === 0);
  t.ok(
    answered.every((r) => r.status === 200),
    `${answered.length} answers, all 200 (-1: no answer in 30 s)`,
  );
  t.ok(
    dropped.length <= concurrency,
    `${dropped.length} requests lost with the killed front's connections (at most one per connection)`,
  );

  t.ok(answered.filter((r) => r.at > killedAt).length > 0, 'served on after the kill');
  t.equal((await server.post('/api/embed/tile-embed', tileRequest(tile))).status, 200);
});

t.test(
  'a front killed while it could not take its connections: every connection is answered by the other',
  async (t) => {
    const server = await startServer({ models: [{ name: 'gene-expr' }], config: { fronts: FRONTS, supervisor: fast } });
    t.teardown(() => server.stop());
    const fronts = () => server.lines.filter((l) => /Server listening/.test(String(l.msg))).map((l) => l.pid as number);
    await server.waitFor(() => fronts().length === FRONTS);
    await server.allWorkersReady();
    // A stopped front cannot accept; a connection handed to it before its death must not be held
    // open unanswered (node's round-robin primary did so, forever).
    const stopped = fronts()[0];
    process.kill(stopped, 'SIGSTOP');
    const body = JSON.stringify(tileRequest(tile));
    const statuses = Promise.all(
      Array.from(
        { length: 4 },
        () =>
          new Promise<number>((resolve) => {
            const req = request(`${server.url}/api/predict/gene-expr`, {
              method: 'POST',
              agent: false,
              headers: { 'content-type': 'application/json' },
              timeout: 20_000,
            });
            req.on('response', (res) => res.resume().on('end', () => resolve(res.statusCode ?? 0)));
            req.on('timeout', () => req.destroy());
            req.on('error', () => resolve(-1));
            req.end(body);
          }),
      ),
    );
    await new Promise((r) => setTimeout(r, 500));
    process.kill(stopped, 'SIGKILL');
    t.same(await statuses, [200, 200, 200, 200], 'four connections, each answered 200 (-1: none in 20 s)');
  },
);
