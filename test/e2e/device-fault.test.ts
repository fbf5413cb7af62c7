// A worker whose device fails (a sticky CUDA error, out of memory, a lost device) stops serving
// and is restarted, instead of failing every later request. The fault is injected into real
// worker processes through the session thread's test hook (TILE_TEST_DEVICE_FAULT: the first
// worker to run a batch after the file appears fails that run and every later one, with the
// message of CUDA's illegal-address error).
import t from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, type TestServer } from '../helpers/server.js';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';
import { tempDir } from '../../tools/temp-dir.js';

type Json = Record<string, any>;

const fault = join(tempDir('fault'), 'device-fault');
const server = await startServer({
  models: [
    { name: 'tissue-seg', gpus: [], instances: 1, intra_op_threads: 1 },
    { name: 'gene-expr', gpus: [], instances: 2, intra_op_threads: 1 },
  ],
  env: { TILE_TEST_DEVICE_FAULT: fault },
});
t.teardown(() => server.stop());
await server.allWorkersReady();

const workers = async (s: TestServer) => ((await (await s.get('/diagnostics')).json()) as Json).workers as Json[];
/** Waits until `model`'s instance that faulted was restarted and every instance is ready again. */
async function recovered(model: string): Promise<Json> {
  let faulted: Json | undefined;
  await server.waitFor(async () => {
    const list = (await workers(server)).filter((w) => w.model === model);
    faulted = list.find((w) => /device fault: CUDA failure 700/.test(w.last_error ?? ''));
    return !!faulted && list.every((w) => w.state === 'ready');
  }, 60000);
  return faulted!;
}

const segRequest = tileRequest(fixturePng('he-mixed'), { resolution: 8 });
const geneRequest = (seed: number) => tileRequest(cellularPng(seed), { resolution: 0.5 });
/** Every answer comes, in time: 200 or a retryable 503. */
async function ask(path: string, body: Json) {
  const response = await server.post(path, body, {});
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: (await response.json()) as Json,
  };
}

t.test('one instance: the request during the fault is answered 503 loading, then the model serves again', async (t) => {
  writeFileSync(fault, '');
  const during = await ask('/api/predict/tissue-seg', segRequest);
  t.equal(during.status, 503, 'retryable, not a 500');
  t.same(during.body, { status: 'loading' });
  t.ok(during.retryAfter, 'with Retry-After');
  const faulted = await recovered('tissue-seg');
  t.equal(faulted.restarts, 1, 'the worker was restarted once');
  t.equal(faulted.last_exit.code, 5, 'exit status DEVICE_FAULT');
  t.equal((await ask('/api/predict/tissue-seg', segRequest)).status, 200, 'a fresh worker serves');
});

t.test('two instances: requests during the fault are retried on the other one', async (t) => {
  writeFileSync(fault, '');
  const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => ask('/api/predict/gene-expr', geneRequest(i))));
  for (const a of answers)
    t.ok(a.status === 200 || (a.status === 503 && a.body.status === 'loading' && a.retryAfter), `answered ${a.status}`);
  t.same(
    answers.map((a) => a.status),
    Array(8).fill(200),
    'all served, by the other instance when not by the first',
  );
  const faulted = await recovered('gene-expr');
  t.equal(faulted.restarts, 1);
  const after = await Promise.all(
    Array.from({ length: 4 }, (_, i) => ask('/api/predict/gene-expr', geneRequest(100 + i))),
  );
  t.same(
    after.map((a) => a.status),
    [200, 200, 200, 200],
  );
});
