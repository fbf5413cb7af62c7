// SIGHUP reloads with real processes: requests keep being served while every instance is
// replaced, reloads asked for in quick succession do not overlap, and a stop during a reload
// leaves no process behind.
import t from 'tap';
import { readFileSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from '../helpers/server.js';
import { copyPackage, shellDigest } from '../helpers/packages.js';
import { load, pidOf, workers, type Json } from '../helpers/load.js';
import { alive, childProcesses } from '../helpers/procs.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';

const tile = cellularPng(31);

t.test('SIGHUP reloads packages one worker at a time without dropping requests', async (t) => {
  // One instance, and a front that learns of its replacement late: it is paused (SIGSTOP) with
  // requests waiting on its keep-alive connections from before the SIGHUP until after the new
  // instance is ready, so it routes them by the old state.
  const dir = copyPackage('gene-expr');
  // A front paused that long measures the pause as event-loop delay: no pressure limit here.
  const server = await startServer({
    models: [{ name: 'gene-expr', path: dir }],
    config: { fronts: 1, pressure: { max_event_loop_delay_ms: 0 } },
  });
  t.teardown(() => server.stop());
  await server.allWorkersReady();
  const before = await pidOf(server, 'gene-expr#0');
  const front = server.lines.find((l) => /Server listening/.test(String(l.msg)))!.pid as number;
  const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
  manifest.description = 'reloaded package';
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest));
  const post = () =>
    server
      .post('/api/predict/gene-expr', tileRequest(tile))
      .then(async (r) => ({ status: r.status, body: (await r.json()) as Json }));
  await Promise.all(Array.from({ length: 8 }, post));
  process.kill(front, 'SIGSTOP');
  const held = Array.from({ length: 8 }, post);
  await new Promise((r) => setTimeout(r, 200));
  server.proc.kill('SIGHUP');
  await server.waitFor(() => server.lines.filter((l) => l.msg === 'worker ready').length === 2, 30000);
  await new Promise((r) => setTimeout(r, 500));
  process.kill(front, 'SIGCONT');
  const gene = load(server, '/api/predict/gene-expr', tile, 8);
  await server.waitFor(() => server.lines.some((l) => l.msg === 'reload done'), 30000);
  const results = [...(await Promise.all(held)), ...(await gene.stop())];
  const failed = results.filter((r) => r.status !== 200);
  t.same(failed.slice(0, 3), [], `${results.length} requests during the reload, ${failed.length} not 200`);
  t.equal(((await (await server.get('/api/metadata/gene-expr')).json()) as Json).description, 'reloaded package');
  t.not(await pidOf(server, 'gene-expr#0'), before, 'the worker was replaced');
});

t.test(
  'a package file changed in place, size and mtime kept: after SIGHUP every answer names the new sha256',
  async (t) => {
    // The worker keeps each file's sum in data_dir between loads: the change must still be seen.
    const dir = copyPackage('gene-expr');
    const file = join(dir, 'manifest.json');
    for (const name of ['manifest.json', 'model.onnx']) utimesSync(join(dir, name), 1_700_000_000, 1_700_000_000);
    // Files changed less than 1 s before a load are not cached: these are, at the first load.
    await new Promise((r) => setTimeout(r, 1100));
    const server = await startServer({ models: [{ name: 'gene-expr', path: dir }], config: { fronts: 1 } });
    t.teardown(() => server.stop());
    const served = async () => {
      const res = await server.post('/api/predict/gene-expr', tileRequest(tile));
      const meta = (await (await server.get('/api/metadata/gene-expr')).json()) as Json;
      return { status: res.status, header: res.headers.get('x-model-sha256'), metadata: meta.sha256 };
    };
    const before = shellDigest(dir);
    t.same(await served(), { status: 200, header: before, metadata: before });
    t.equal(readdirSync(join(server.dir, 'data', 'package-digests')).length, 1, 'sums cached in data_dir');
    const manifest = JSON.parse(readFileSync(file, 'utf8'));
    manifest.description = manifest.description.replace(/^./, (c: string) => (c === 'X' ? 'Y' : 'X'));
    writeFileSync(file, JSON.stringify(manifest, null, 2));
    utimesSync(file, 1_700_000_000, 1_700_000_000);
    const after = shellDigest(dir);
    t.not(after, before);
    server.proc.kill('SIGHUP');
    await server.waitFor(() => server.lines.some((l) => l.msg === 'reload done'), 30000);
    t.same(await served(), { status: 200, header: after, metadata: after });
  },
);

const workerProcesses = (supervisor: number) => childProcesses(supervisor, 'src/worker/main.js');

t.test(
  'SIGHUPs in quick succession: one reload follows the running one; no process beside those /diagnostics lists',
  async (t) => {
    const server = await startServer({ models: [{ name: 'tissue-seg', instances: 2 }], config: { fronts: 1 } });
    t.teardown(() => server.stop());
    await server.allWorkersReady();
    for (let i = 0; i < 3; i++) {
      server.proc.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 500));
    }
    const count = (msg: string) => server.lines.filter((l) => l.msg === msg).length;
    await server.waitFor(
      () => count('reload done') > 0 && count('reload done') === count('reloading workers one at a time'),
      120000,
    );
    await server.allWorkersReady();
    const listed = (await workers(server)).map((w) => w.pid as number).sort((a, b) => a - b);
    t.same(workerProcesses(server.proc.pid!), listed, 'the worker processes are exactly those /diagnostics lists');
    t.equal(listed.length, 2);
  },
);

t.test(
  'SIGTERM during a reload: the replacement being loaded is stopped too, before the supervisor exits',
  async (t) => {
    const server = await startServer({ models: [{ name: 'gene-expr' }], config: { fronts: 1 } });
    await server.allWorkersReady();
    server.proc.kill('SIGHUP');
    await server.waitFor(() => workerProcesses(server.proc.pid!).length === 2, 10000);
    const forked = workerProcesses(server.proc.pid!);
    t.equal(await server.stop('SIGTERM'), 0, 'exit 0');
    t.same(forked.filter(alive), [], 'no worker outlives the supervisor');
    t.notOk(
      server.lines.some((l) => String(l.msg).startsWith('reload: replacement failed')),
      'the stop is not reported as a failed reload',
    );
  },
);
