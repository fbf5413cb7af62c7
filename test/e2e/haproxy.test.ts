// Three service hosts behind a real HAProxy running deploy/haproxy/haproxy.cfg, with load at
// c=32 through it for the whole test (JSON, PNG and raw RGB bodies), while hosts are killed,
// restarted, reloaded and broken.
// Per event it reports the requests that completed, those that failed at the client and p99.
import t from 'tap';
import { setPriority } from 'node:os';
import { startServer, waitFor, type TestServer } from '../helpers/server.js';
import { startBalancer, type Balancer } from '../helpers/haproxy.js';
import { corruptPackage } from '../helpers/packages.js';
import { PNG } from 'pngjs';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';

// Fixed ports of this test (19300-19399): the balancer, its stats page, three hosts.
const LB_PORT = 19300;
const STATS_PORT = 19380;
const HOST_PORTS = [19301, 19302, 19303];
const SERVERS = ['host1', 'host2', 'host3'];
const BACKENDS = ['hosts', 'model-tissue-seg', 'model-gene-expr'];
const CONCURRENCY = 32;
/** The load stops at this many requests even if the test has not ended. */
const MAX_REQUESTS = 40000;
/** Longer than the test's check timing takes to see a host down (200 ms + 100 ms, and the checks
 *  of a loaded host on this shared machine answer late). */
const DRAIN_MS = 2500;
/** A host starting while the others serve the load shares the cores with them. */
const STARTUP_MS = 120000;
/** Scheduling priority of a starting host (see startHost). */
const BOOST = -10;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** tissue-seg and gene-expr, one instance each with one ONNX thread: three hosts share 2 cores.
 *  A starting host would have its own cores; here it shares them with two hosts serving the load
 *  and starts many times slower, so it starts at a higher scheduling priority (BOOST, inherited
 *  from this process for the moment of the spawn; needs root, else it only starts slower) and
 *  drops back to normal once ready (`settle`). */
function startHost(i: number, geneExprPath?: string): Promise<TestServer> {
  const boosted = trySetPriority(process.pid, BOOST);
  const host = startServer({
    models: [
      { name: 'tissue-seg', intra_op_threads: 1 },
      { name: 'gene-expr', intra_op_threads: 1, ...(geneExprPath && { path: geneExprPath }) },
    ],
    // Requests in flight at a SIGTERM may take many seconds here: grace up to their deadline.
    config: { port: HOST_PORTS[i], supervisor: { drain_delay_ms: DRAIN_MS, shutdown_grace_ms: 30000 } },
    waitReady: false,
  });
  if (boosted) setPriority(process.pid, 0);
  return host;
}

function trySetPriority(pid: number, priority: number): boolean {
  try {
    setPriority(pid, priority);
    return true;
  } catch {
    return false;
  }
}

/** A host's supervisor and workers at `priority` (BOOST while it starts or stops, else 0). */
function prioritize(host: TestServer, priority: number): void {
  for (const pid of [host.proc.pid!, ...workerPids(host)]) trySetPriority(pid, priority);
}
const settle = (host: TestServer) => prioritize(host, 0);

interface Outcome {
  model: string;
  /** The request body's Content-Type. */
  type?: string;
  start: number;
  end: number;
  status: number | string;
  detail?: string;
}

interface TileBody {
  query: string;
  type: string;
  body: string | Buffer;
}

/** A tile as each body type: JSON, the PNG file, raw RGB pixels (a 512x512 tile's is 786 kB,
 *  within HAProxy's buffer, so its requests are replayed on a retry as JSON ones are). */
function bodiesOf(png: Buffer, fields: Record<string, unknown>): TileBody[] {
  const request = tileRequest(png, fields);
  const { image_data: _, ...rest } = request;
  const query = `?${new URLSearchParams(Object.entries(rest).map(([k, v]): [string, string] => [k, String(v)]))}`;
  const { data, width, height } = PNG.sync.read(png);
  const rgb = Buffer.alloc(width * height * 3);
  for (let i = 0; i < width * height; i++) data.copy(rgb, i * 3, i * 4, i * 4 + 3);
  return [
    { query: '', type: 'application/json', body: JSON.stringify(request) },
    { query, type: 'image/png', body: png },
    { query, type: 'application/octet-stream', body: rgb },
  ];
}

/** `CONCURRENCY` keep-alive request loops through the balancer, half tissue-seg, half gene-expr,
 *  each loop with one body type (JSON, PNG, raw RGB), over a few distinct tiles, until stopped
 *  (or MAX_REQUESTS). */
function startLoad(url: string) {
  const bodies: Record<string, TileBody[][]> = {
    'tissue-seg': ['he-mixed', 'he-fat', 'ihc-pale'].map((name) => bodiesOf(fixturePng(name), { resolution: 8.0 })),
    'gene-expr': [1, 2, 3].map((seed) => bodiesOf(cellularPng(seed), { resolution: 0.5 })),
  };
  const outcomes: Outcome[] = [];
  let running = true;
  const loops = Array.from({ length: CONCURRENCY }, async (_, i) => {
    const model = i % 2 ? 'gene-expr' : 'tissue-seg';
    const form = Math.floor(i / 2) % 3;
    for (let n = 0; running && outcomes.length < MAX_REQUESTS; n++) {
      const start = performance.now();
      const outcome: Outcome = { model, start, end: 0, status: 0 };
      try {
        const tile = bodies[model][n % 3][form];
        outcome.type = tile.type;
        const res = await fetch(`${url}/api/predict/${model}${tile.query}`, {
          method: 'POST',
          headers: { 'content-type': tile.type },
          body: tile.body,
        });
        outcome.status = res.status;
        const body = await res.text();
        if (res.status !== 200) outcome.detail = body.slice(0, 200);
      } catch (err) {
        outcome.status = String((err as { cause?: { code?: string } }).cause?.code ?? err);
      }
      outcome.end = performance.now();
      outcomes.push(outcome);
    }
  });
  return {
    outcomes,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

interface EventFigures {
  event: string;
  seconds: number;
  requests: number;
  failures: number;
  p99: number;
  failed: Outcome[];
}

/** The requests that completed between `from` and now. */
function figures(event: string, outcomes: Outcome[], from: number): EventFigures {
  const to = performance.now();
  const done = outcomes.filter((o) => o.end >= from && o.end <= to);
  const latencies = done.map((o) => o.end - o.start).sort((a, b) => a - b);
  const failed = done.filter((o) => o.status !== 200);
  return {
    event,
    seconds: (to - from) / 1000,
    requests: done.length,
    failures: failed.length,
    p99: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))] ?? NaN,
    failed: failed.slice(0, 5),
  };
}

/** The host's current worker processes, from its log (its HTTP may be slow under this load). */
function workerPids(host: TestServer): number[] {
  const latest = new Map<string, number>();
  for (const l of host.lines)
    if (l.msg === 'worker forked') latest.set(`${l.model}#${l.instance}`, l.workerPid as number);
  return [...latest.values()];
}

/** Requests a host answered for each model, from its own metrics. */
async function servedByModel(host: TestServer): Promise<Record<string, number>> {
  const text = await (await host.get('/metrics')).text();
  const served: Record<string, number> = {};
  for (const [, model, value] of text.matchAll(/^tile_requests_total\{model="([^"]+)"[^}]*\} (\d+)/gm))
    served[model] = (served[model] ?? 0) + Number(value);
  return served;
}

t.test('SIGTERM drains: readiness 503 while requests are still served, then exit 0', async (t) => {
  const host = await startServer({
    models: [{ name: 'tissue-seg', intra_op_threads: 1 }],
    config: { supervisor: { drain_delay_ms: DRAIN_MS } },
  });
  t.teardown(() => host.stop());
  const signalled = performance.now();
  const stopped = host.stop('SIGTERM');
  await waitFor(() => host.lines.some((l) => /^draining/.test(String(l.msg))));
  const [ready, all, tile] = await Promise.all([
    host.get('/health/ready/tissue-seg'),
    host.get('/health/ready'),
    host.post('/api/predict/tissue-seg', tileRequest(fixturePng('he-mixed'))),
  ]);
  t.same([ready.status, await ready.json()], [503, { model: 'tissue-seg', status: 'draining', reason: null }]);
  t.match(await all.json(), { status: 'draining' });
  t.equal(tile.status, 200, 'still serving');
  await tile.arrayBuffer();
  t.equal(await stopped, 0, 'exit 0');
  t.ok(performance.now() - signalled >= DRAIN_MS, 'not before the drain delay');
});

t.test('three hosts behind HAProxy under load at c=32: kill -9, rolling restart, reload, a broken model', async (t) => {
  const began = performance.now();
  const step = (what: string) => t.comment(`${((performance.now() - began) / 1000).toFixed(1)} s: ${what}`);
  const hosts: TestServer[] = [];
  let lb: Balancer | undefined;
  let load: ReturnType<typeof startLoad> | undefined;
  // Should the test process end early (tap's timeout), take the hosts and HAProxy with it.
  const killAll = () => [...hosts.map((h) => h.proc), lb?.proc].forEach((p) => p?.kill('SIGKILL'));
  process.once('exit', killAll);
  t.teardown(async () => {
    await load?.stop();
    await Promise.all(hosts.map((h) => h.stop()));
    await lb?.stop();
    process.off('exit', killAll);
  });
  const started = await Promise.allSettled(HOST_PORTS.map((_, i) => startHost(i)));
  for (const s of started) if (s.status === 'fulfilled') hosts.push(s.value);
  for (const s of started) if (s.status === 'rejected') throw s.reason;
  for (const host of hosts) await waitFor(async () => (await host.get('/health/ready')).status === 200, STARTUP_MS);
  hosts.forEach(settle);
  lb = await startBalancer({
    port: LB_PORT,
    statsPort: STATS_PORT,
    hosts: HOST_PORTS.map((p) => `127.0.0.1:${p}`),
    checkInter: '200ms',
    checkFastInter: '100ms',
    slowstart: '2s',
  });
  for (const server of SERVERS) await lb.waitServer(server, BACKENDS, 'UP', STARTUP_MS);
  step('hosts up');
  const idleRss = lb.rss();

  load = startLoad(lb.url);
  const results: EventFigures[] = [];
  step('balancer up, load started');
  const record = (f: EventFigures) => {
    step(`${f.event}: ${f.requests} requests, ${f.failures} failed, p99 ${f.p99.toFixed(0)} ms`);
    results.push(f);
    // HAProxy's line of each request that did not end normally (termination state other than ----).
    const abnormal = lb!.log.filter((l) => l.includes(' tiles ') && !l.includes(' ---- ')).slice(-10);
    t.equal(f.failures, 0, `${f.event}: ${f.requests} requests, ${f.failures} failed at the client`, {
      failed: f.failed,
      abnormal,
    });
    t.ok(f.requests > 0, `${f.event}: requests completed`);
  };
  /** Starts host i again and waits until HAProxy has it back in `backends`. */
  const restart = async (i: number, backends: string[], geneExprPath?: string) => {
    hosts[i] = await startHost(i, geneExprPath);
    await lb!.waitServer(SERVERS[i], backends, 'UP', STARTUP_MS);
    settle(hosts[i]);
    step(`${SERVERS[i]} back`);
  };

  // Steady state, and what the large buffers cost under this load.
  let from = performance.now();
  let peakRss = 0;
  while (performance.now() - from < 3000 || load.outcomes.length < CONCURRENCY) {
    peakRss = Math.max(peakRss, lb.rss());
    await sleep(100);
  }
  record(figures('steady', load.outcomes, from));

  // SIGHUP reloads host2's workers one at a time: its readiness never drops.
  from = performance.now();
  const chkdown = async () =>
    [...(await lb!.stats())].filter(([key]) => key.endsWith('/host2')).map(([, row]) => Number(row.chkdown));
  const downsBefore = await chkdown();
  const reloaded = () => hosts[1].lines.some((l) => l.msg === 'reload done');
  prioritize(hosts[1], BOOST); // its replacement workers start as a starting host does
  hosts[1].proc.kill('SIGHUP');
  const readiness: number[] = [];
  while (!reloaded() && performance.now() - from < STARTUP_MS) {
    for (const model of ['tissue-seg', 'gene-expr'])
      readiness.push((await hosts[1].get(`/health/ready/${model}`)).status);
    await sleep(50);
  }
  t.ok(reloaded(), 'host2 reloaded');
  t.ok(
    readiness.length > 0 && readiness.every((s) => s === 200),
    `host2 ready at each of ${readiness.length} checks during the reload`,
  );
  settle(hosts[1]);
  t.same(await chkdown(), downsBefore, 'HAProxy never saw host2 down');
  record(figures('SIGHUP reload of host2', load.outcomes, from));

  // Rolling restart: each host in turn gets SIGTERM, drains, exits, starts and becomes ready. The
  // last one comes back with a broken gene-expr package (an upgrade gone wrong): it is ready for
  // tissue-seg only.
  from = performance.now();
  const broken = corruptPackage('gene-expr');
  for (let i = 0; i < hosts.length; i++) {
    const logged = lb.log.length;
    prioritize(hosts[i], BOOST); // finishing its requests in flight sooner
    const stopped = hosts[i].stop('SIGTERM');
    const downs = () =>
      lb!.log.slice(logged).filter((l) => l.startsWith('Server ') && l.includes(`/${SERVERS[i]} is DOWN`));
    await waitFor(() => BACKENDS.every((b) => downs().some((l) => l.startsWith(`Server ${b}/`))), 30000);
    t.same(
      BACKENDS.map(
        (b) =>
          downs()
            .find((l) => l.startsWith(`Server ${b}/`))
            ?.match(/reason: (Layer\d)/)?.[1],
      ),
      BACKENDS.map(() => 'Layer7'),
      `HAProxy took ${SERVERS[i]} out on its readiness answer (draining), before it closed (Layer4)`,
    );
    t.equal(await stopped, 0, `${SERVERS[i]} exited 0 after draining`, { log: hosts[i].lines.slice(-8) });
    const last = i === hosts.length - 1;
    await restart(i, last ? ['hosts', 'model-tissue-seg'] : BACKENDS, last ? broken : undefined);
  }
  record(figures('rolling restart of 3 hosts', load.outcomes, from));

  // host3's gene-expr failed: HAProxy keeps it out of gene-expr, its tissue-seg serves.
  from = performance.now();
  const gene = await hosts[2].get('/health/ready/gene-expr');
  t.equal(gene.status, 503, `host3 gene-expr not ready: ${JSON.stringify(await gene.json())}`);
  t.equal((await lb.stats()).get('model-gene-expr/host3')?.status, 'DOWN', 'HAProxy keeps host3 out of gene-expr');
  await sleep(3000);
  const served = await servedByModel(hosts[2]);
  t.ok(served['tissue-seg'] > 0, `host3 served ${served['tissue-seg']} tissue-seg requests`);
  t.equal(served['gene-expr'] ?? 0, 0, 'host3 got no gene-expr request');
  record(figures('host3 gene-expr failed', load.outcomes, from));

  // kill -9 of one whole host (supervisor and its workers); the others carry on.
  from = performance.now();
  for (const pid of workerPids(hosts[0])) process.kill(pid, 'SIGKILL');
  t.equal(await hosts[0].stop('SIGKILL'), null, 'host1 killed');
  await lb.waitServer('host1', BACKENDS, 'DOWN');
  await sleep(2000);
  record(figures('kill -9 of host1', load.outcomes, from));

  await load.stop();
  const total = load.outcomes.length;

  // A body larger than a buffer (not retried) still goes through: the host's 422, not HAProxy's 400.
  const big = await fetch(`${lb.url}/api/predict/tissue-seg`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(tileRequest(fixturePng('he-mixed'), { image_data: 'A'.repeat(2 * 1024 * 1024) })),
  });
  t.equal(big.status, 422, 'a 2 MB body reaches a host');
  t.match(await big.json(), { detail: [{ loc: ['body', 'image_data'] }] });

  t.comment(
    `HAProxy RSS: ${(idleRss / 2 ** 20).toFixed(1)} MiB idle, ${(peakRss / 2 ** 20).toFixed(1)} MiB peak at c=${CONCURRENCY} (${((peakRss - idleRss) / CONCURRENCY / 2 ** 20).toFixed(2)} MiB per connection)`,
  );
  t.comment(`${total} requests in all at c=${CONCURRENCY}`);
  t.comment('| event | seconds | requests | failures | p99 ms |');
  t.comment('|---|---|---|---|---|');
  for (const f of results)
    t.comment(`| ${f.event} | ${f.seconds.toFixed(1)} | ${f.requests} | ${f.failures} | ${f.p99.toFixed(0)} |`);
});
