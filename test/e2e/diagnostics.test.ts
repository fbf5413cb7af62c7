// /diagnostics, the usage log and /metrics end to end.
import t from 'tap';
import { appendFileSync, writeFileSync } from 'node:fs';
import { hostname, homedir, userInfo } from 'node:os';
import { join } from 'node:path';
import { startServer, ROOT, type TestServer } from '../helpers/server.js';
import { fakeNvidiaSmi } from '../helpers/packages.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { tempDir } from '../../tools/temp-dir.js';

type Json = Record<string, any>;
const tile = cellularPng(41);
const get = async (server: TestServer, path: string, headers?: Record<string, string>) => {
  const res = await server.get(path, headers);
  return { status: res.status, body: (await res.json()) as Json };
};

t.test('categories select the payload; anything else is a 422', async (t) => {
  const server = await startServer({ models: [{ name: 'tile-embed', gpus: [] }] });
  t.teardown(() => server.stop());
  const full = await get(server, '/diagnostics');
  t.equal(full.status, 200);
  for (const key of ['versions', 'host', 'gpus', 'disk', 'models', 'workers', 'logs', 'usage_summary'])
    t.ok(key in full.body, `full payload has ${key}`);
  t.match(full.body.versions, {
    service: '1.0.0',
    node: process.versions.node,
    onnxruntime: '1.30.0',
    dependencies: { fastify: String, 'onnxruntime-node': '1.30.0' },
  });
  t.match(full.body.host, { os: String, kernel: String, cpu_count: Number, memory_total_bytes: Number });
  t.notOk('hostname' in full.body.host);
  t.equal(full.body.gpus, 'none');
  t.match(full.body.disk.models, { free_bytes: Number, total_bytes: Number });
  t.match(full.body.models['tile-embed'], { state: 'ready', sha256: /^[0-9a-f]{64}$/ });
  t.match(full.body.workers[0], {
    id: 'tile-embed#0',
    pid: Number,
    state: 'ready',
    restarts: 0,
    usage: { cpu_pct: Number, memory_bytes: Number },
    probe: { pid: Number, memory: Object },
  });

  const diag = await get(server, '/diagnostics?categories=diagnostics');
  t.same(Object.keys(diag.body), ['diagnostics']);
  t.ok(diag.body.diagnostics.workers);
  const usage = await get(server, '/diagnostics?categories=usage');
  t.same(Object.keys(usage.body), ['usage']);
  const both = await get(server, '/diagnostics?categories=usage,diagnostics');
  t.same(Object.keys(both.body).sort(), ['diagnostics', 'usage']);
  const bad = await get(server, '/diagnostics?categories=usage,secrets');
  t.equal(bad.status, 422);
  t.match(bad.body.detail[0], { loc: ['query', 'categories'], type: 'literal_error', input: 'usage,secrets' });
});

t.test('a failing probe and an unresponsive worker degrade to error sections', async (t) => {
  const server = await startServer({
    models: [
      { name: 'gene-expr', gpus: [] },
      { name: 'tile-embed', gpus: [] },
    ],
    env: { PATH: `${fakeNvidiaSmi(null)}:${process.env.PATH}` },
    config: { supervisor: { probe_timeout_ms: 500, heartbeat_timeout_ms: 60000 } },
  });
  t.teardown(() => server.stop());
  const pid = (await get(server, '/diagnostics')).body.workers.find((w: Json) => w.id === 'gene-expr#0').pid;
  process.kill(pid, 'SIGSTOP');
  t.teardown(() => process.kill(pid, 'SIGCONT'));
  const started = Date.now();
  const { status, body } = await get(server, '/diagnostics');
  t.equal(status, 200);
  t.ok(Date.now() - started < 3000, `answered in ${Date.now() - started} ms`);
  t.match(body.gpus, { error: /timed out after 500 ms/ }, 'hung nvidia-smi: gpus section is an error');
  const workers = Object.fromEntries(body.workers.map((w: Json) => [w.id, w]));
  t.match(workers['gene-expr#0'].probe, { error: /did not answer its probe within 500 ms/ });
  t.match(workers['tile-embed#0'].probe, { pid: Number });
  t.ok(body.versions.service, 'other sections intact');
});

t.test('log tails from the supervisor and the workers; empty without a log file', async (t) => {
  // The device-fault test hook fails the first worker's warm-up: an error on its stderr, then a restart.
  const fault = join(tempDir('fault'), 'device-fault');
  writeFileSync(fault, '');
  const server = await startServer({
    models: [{ name: 'tile-embed', gpus: ['3'] }],
    env: { TILE_TEST_DEVICE_FAULT: fault },
  });
  t.teardown(() => server.stop());
  const { body } = await get(server, '/diagnostics');
  t.ok(
    body.logs.service.some((l: string) => l.includes('Server listening')),
    'service log tail',
  );
  const tail = body.logs.workers['tile-embed#0'];
  t.ok(
    tail.some((l: string) => l.includes(' stderr ') && /failed to load \[TILE_ERR_\w+\]: CUDA failure 700/.test(l)),
    'worker stderr tail',
  );
  t.ok(
    tail.some((l: string) => l.includes('provider cuda passed over')),
    'worker log messages',
  );

  const quiet = await startServer({ models: [{ name: 'tile-embed', gpus: [] }], env: { LOG_FILE: '' } });
  t.teardown(() => quiet.stop());
  const q = await get(quiet, '/diagnostics');
  t.same(q.body.logs, { service: [], workers: {} });
});

t.test('usage entries after requests, kept across a restart of the service, never the slide name', async (t) => {
  const data = tempDir('usage');
  const options = { models: [{ name: 'gene-expr', gpus: [] }], config: { data_dir: data } };
  const first = await startServer(options);
  await first.post('/api/predict/gene-expr', tileRequest(tile, { slide_name: 'SLIDE-SECRET-1' }));
  await first.post(
    '/api/predict/gene-expr?mode=prediction_with_embedding',
    tileRequest(tile, { slide_name: 'SLIDE-SECRET-1' }),
  );
  await first.post('/api/embed/gene-expr', tileRequest(tile, { slide_name: 'SLIDE-SECRET-1', x: 'left' }));
  const usage = (await get(first, '/diagnostics?categories=usage')).body.usage;
  t.equal(usage.length, 3);
  t.match(usage[0], {
    model: 'gene-expr',
    endpoint: 'predict',
    mode: 'prediction',
    status: 200,
    duration_ms: Number,
    tile: '224x224',
    timestamp: String,
  });
  t.match(usage[1], { mode: 'prediction_with_embedding', status: 200 });
  t.match(usage[2], { endpoint: 'embed', mode: 'embedding', status: 422 });
  t.notMatch(JSON.stringify(usage), /SLIDE-SECRET/);
  t.same(
    (await get(first, '/diagnostics')).body.usage_summary.find((s: Json) => s.status === 422),
    { model: 'gene-expr', endpoint: 'embed', status: 422, count: 1 },
  );
  // Answered just before the stop: the front sends its last batch of entries before it exits.
  await first.post('/api/predict/gene-expr', tileRequest(tile, { x: 'last' }));
  await first.stop();

  const second = await startServer(options);
  t.teardown(() => second.stop());
  await second.post('/api/embed/gene-expr', tileRequest(tile));
  const after = (await get(second, '/diagnostics?categories=usage')).body.usage;
  t.equal(after.length, 5, 'entries survive the restart, the last before the stop included');
  t.match(after[3], { endpoint: 'predict', status: 422 });
  t.match(after[4], { endpoint: 'embed', status: 200 }, 'newest last');
});

t.test('anonymization: planted values never leave the endpoint', async (t) => {
  const secret = 'tok-PLANTED-9f8e7d6c';
  const server = await startServer({ models: [{ name: 'tile-embed', gpus: [] }], env: { DEPLOY_SECRET: secret } });
  t.teardown(() => server.stop());
  await server.post('/api/embed/tile-embed', tileRequest(tile, { slide_name: 'PATIENT-0042-SLIDE' }));
  const user = userInfo().username;
  const planted = [
    hostname(),
    homedir(),
    ROOT.replace(/\/$/, ''),
    '10.20.30.40',
    '2001:db8:85a3::8a2e:370:7334',
    '0a:1b:2c:3d:4e:5f',
    secret,
    'PATIENT-0042-SLIDE',
  ];
  appendFileSync(
    server.logFile,
    JSON.stringify({
      level: 30,
      msg: `planted: host=${hostname()} user=${user} home=${homedir()}/.cache install=${ROOT}models ip=10.20.30.40 ip6=2001:db8:85a3::8a2e:370:7334 mac=0a:1b:2c:3d:4e:5f env=${secret} slide=PATIENT-0042-SLIDE loopback=127.0.0.1`,
    }) + '\n',
  );
  const text = await (await server.get('/diagnostics?categories=usage,diagnostics')).text();
  for (const value of planted) t.notOk(text.includes(value), `${value} is not in the payload`);
  t.notMatch(text, new RegExp(`user=${user}\\b`), 'user name scrubbed');
  const line = JSON.parse(text).diagnostics.logs.service.find((l: string) => l.includes('planted'));
  t.match(
    line,
    /host=<host> user=<user> home=<home>\/\.cache install=<install> ip=<ip> ip6=<ip> mac=<mac> env=<env:DEPLOY_SECRET> slide=<slide> loopback=127\.0\.0\.1/,
  );
});

t.test('/metrics counts what was served', async (t) => {
  const server = await startServer({ models: [{ name: 'gene-expr', gpus: [] }] });
  t.teardown(() => server.stop());
  for (let i = 0; i < 5; i++) await server.post('/api/predict/gene-expr', tileRequest(tile));
  await server.post('/api/predict/gene-expr', tileRequest(tile, { x: 'left' }));
  const res = await server.get('/metrics');
  t.match(res.headers.get('content-type'), /text\/plain/);
  const text = await res.text();
  const value = (pattern: string) => Number(new RegExp(`^${pattern} (\\S+)$`, 'm').exec(text)?.[1]);
  t.equal(value('tile_requests_total\\{model="gene-expr",endpoint="predict",status="200"\\}'), 5);
  t.equal(value('tile_requests_total\\{model="gene-expr",endpoint="predict",status="422"\\}'), 1);
  t.equal(value('tile_request_duration_seconds_count\\{model="gene-expr",endpoint="predict"\\}'), 6);
  t.equal(value('model_batch_size_count\\{model="gene-expr"\\}'), 5);
  t.equal(value('worker_up\\{model="gene-expr",instance="0"\\}'), 1);
  t.equal(value('model_queue_depth\\{model="gene-expr"\\}'), 0);
  t.equal(value('worker_restarts\\{model="gene-expr",instance="0"\\}'), 0);
});

t.test('an optional bearer token guards /diagnostics and /metrics', async (t) => {
  const server = await startServer({
    models: [{ name: 'tile-embed', gpus: [] }],
    env: { ADMIN_TOKEN: 'let-me-in-123' },
  });
  t.teardown(() => server.stop());
  t.equal((await server.get('/diagnostics')).status, 401);
  t.equal((await server.get('/metrics')).status, 401);
  t.equal((await server.get('/diagnostics', { authorization: 'Bearer let-me-in-123' })).status, 200);
  t.equal((await server.get('/metrics', { authorization: 'Bearer let-me-in-123' })).status, 200);
  t.equal(
    (await server.post('/api/embed/tile-embed', tileRequest(tile))).status,
    200,
    'model endpoints stay open, as the spec says',
  );
});

t.test("scrubbing never rewrites the payload's own data: MODELS and slide names steer nothing", async (t) => {
  const server = await startServer({
    models: [
      { name: 'tile-embed', gpus: [] },
      { name: 'gene-expr', gpus: [] },
    ],
    env: { MODELS: 'tile-embed' },
  });
  t.teardown(() => server.stop());
  for (const slide_name of ['tile', 'ready', 'pid', 'embed', 'tile-embed'])
    await server.post('/api/embed/tile-embed', tileRequest(tile, { slide_name }));
  const { body } = await get(server, '/diagnostics?categories=usage,diagnostics');
  t.same(Object.keys(body.diagnostics.models), ['tile-embed'], 'model name as a key');
  t.match(body.diagnostics.models['tile-embed'], { state: 'ready', instances: 1 });
  t.match(body.diagnostics.workers[0], { id: 'tile-embed#0', state: 'ready', pid: Number });
  t.match(body.usage[0], { model: 'tile-embed', endpoint: 'embed', mode: 'embedding', status: 200 });
  t.notMatch(JSON.stringify(body), /<env:MODELS>|<slide>-|-<slide>/, 'no model name or id rewritten');
});
