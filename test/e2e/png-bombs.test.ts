// PNG bombs against the real service: each kind is a 422 at image_data, the worker's memory stays
// bounded (its peak RSS, VmHWM, from /proc), the same worker keeps serving, and a client sending
// bombs in a loop lifts another client's latency only a little (a ratio measured in this run).
// Also: decode_threads sizes the worker's libuv pool, where it decodes.
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { bombs } from '../png-forge.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const DECODE_THREADS = 3;
// tile-embed, with one decode thread, is there to compare thread counts with (libuv 1.46 does not
// name its threads).
const server = await startServer({
  models: [
    { name: 'gene-expr', decode_threads: DECODE_THREADS, intra_op_threads: 1 },
    { name: 'tile-embed', decode_threads: 1, intra_op_threads: 1 },
  ],
});
t.teardown(() => server.stop());

const ROUTE = '/api/predict/gene-expr';
const tile = tileRequest(cellularPng(5));

async function workerPid(id = 'gene-expr#0'): Promise<number> {
  const { workers } = (await (await server.get('/diagnostics')).json()) as Json;
  return workers.find((w: Json) => w.id === id).pid;
}

/** Current and peak resident memory of a process, MiB. */
function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]);
  return { rss: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
}

const EXPECTED: Record<string, RegExp> = {
  'one IDAT': /image data inflates to more than the 150752 bytes a 224x224 PNG needs/,
  interlaced: /image data inflates to more than the 150948 bytes a 224x224 interlaced PNG needs/,
  'many IDATs': /image data inflates to more than the 150752 bytes a 224x224 PNG needs/,
  'trailing stream': /bytes of trailing data after the zlib stream in IDAT/,
};

t.test('each kind of 4 GiB bomb is a 422 at image_data; the worker stays small and serving', async (t) => {
  const pid = await workerPid();
  t.equal((await server.post(ROUTE, tile)).status, 200);
  const before = memory(pid);
  for (const [kind, png] of Object.entries(bombs(4))) {
    const res = await server.post(ROUTE, tileRequest(png));
    if (kind === 'iCCP profile') {
      t.equal(res.status, 200, 'a 4 GiB iCCP profile is left out of decoding; the pixels are valid');
      continue;
    }
    t.equal(res.status, 422, kind);
    const { detail } = (await res.json()) as Json;
    t.match(detail, [{ loc: ['body', 'image_data'], type: 'value_error', msg: EXPECTED[kind] }], kind);
  }
  const after = memory(pid);
  t.comment(
    `worker RSS ${before.rss.toFixed(0)} -> ${after.rss.toFixed(0)} MiB, peak ${before.peak.toFixed(0)} -> ${after.peak.toFixed(0)} MiB over five 4 GiB bombs`,
  );
  t.ok(
    after.peak - before.peak < 256,
    `peak RSS grew ${(after.peak - before.peak).toFixed(0)} MiB (bound 256 MiB; an unbounded inflate needs 4096)`,
  );
  t.equal(await workerPid(), pid, 'the same worker process');
  t.equal((await server.post(ROUTE, tile)).status, 200, 'and it still serves');
});

/** Median latency of `count` sequential valid requests, ms. */
async function medianLatency(count: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const res = await server.post(ROUTE, tile);
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`valid tile answered ${res.status}`);
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b)[count >> 1];
}

t.test('a client sending bombs in a loop barely slows another client', async (t) => {
  const bodies = Object.entries(bombs(1))
    .filter(([kind]) => kind !== 'iCCP profile')
    .map(([, png]) => tileRequest(png));
  await medianLatency(10);
  const quiet = await medianLatency(40);
  let running = true;
  let sent = 0;
  const statuses = new Set<number>();
  const attacker = (async () => {
    while (running) {
      const res = await server.post(ROUTE, bodies[sent++ % bodies.length]);
      statuses.add(res.status);
      await res.arrayBuffer();
    }
  })();
  const underAttack = await medianLatency(40);
  running = false;
  await attacker;
  const ratio = underAttack / quiet;
  t.comment(
    `p50 of a valid client: ${quiet.toFixed(1)} ms alone, ${underAttack.toFixed(1)} ms beside ${sent} bombs (x${ratio.toFixed(2)})`,
  );
  t.same([...statuses], [422], 'every bomb answered 422');
  t.ok(ratio < 5, `p50 ratio ${ratio.toFixed(2)} (an unbounded inflate gave ~48)`);
});

t.test('decode_threads is the size of the libuv pool the worker decodes on', async (t) => {
  const pids = { 'gene-expr': await workerPid(), 'tile-embed': await workerPid('tile-embed#0') };
  for (const model of Object.keys(pids))
    await Promise.all(Array.from({ length: 8 }, () => server.post(`/api/embed/${model}`, tile)));
  const environ = readFileSync(`/proc/${pids['gene-expr']}/environ`, 'latin1').split('\0');
  t.ok(environ.includes(`UV_THREADPOOL_SIZE=${DECODE_THREADS}`), 'forked with UV_THREADPOOL_SIZE');
  const threads = (pid: number) => readdirSync(`/proc/${pid}/task`).length;
  t.equal(
    threads(pids['gene-expr']) - threads(pids['tile-embed']),
    DECODE_THREADS - 1,
    'the worker with 3 decode threads has 2 threads more than the one with 1',
  );
});
