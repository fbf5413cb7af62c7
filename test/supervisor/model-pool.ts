// A model's pool in-process: the real ModelPool and WorkerLifeCycle with fork and the clock
// replaced (test/helpers/fake-worker-process.ts), for the model's state and the order of a
// rolling reload. test/e2e/reload.test.ts does the same with real processes.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { ModelPool } from '../../supervisor/model-pool.js';
import type { WorkerExit } from '../../supervisor/worker-life-cycle.js';
import { FakeOutside, SUPERVISOR, type FakeWorkerProcess } from '../helpers/fake-worker-process.js';

/** A two-instance gene-expr pool from a configuration file, with every process it forks logged. */
function pool(t: Test) {
  const root = t.testdir({
    'config.json': JSON.stringify({ models: [{ name: 'gene-expr', instances: 2 }], supervisor: SUPERVISOR }),
  });
  mkdirSync(join(root, 'models', 'gene-expr'), { recursive: true });
  writeFileSync(join(root, 'models', 'gene-expr', 'manifest.json'), '{}');
  const config = loadConfig({ CONFIG: join(root, 'config.json') }, root);
  const outside = new FakeOutside();
  const events: string[] = [];
  const name = (proc: FakeWorkerProcess) => `p${outside.forked.indexOf(proc)}`;
  const fork = outside.fork.bind(outside);
  outside.fork = (env) => {
    const proc = fork(env);
    events.push(`fork ${name(proc)}`);
    proc.on('exit', () => events.push(`exit ${name(proc)}`));
    return proc;
  };
  outside.onStop = (proc) => {
    events.push(`stop ${name(proc)}`);
    setImmediate(() => proc.exit(0));
  };
  const exits: WorkerExit[] = [];
  const models = new ModelPool({
    entry: config.models[0],
    gpus: [null, null],
    hostGpus: [],
    intraOpThreads: 1,
    config,
    logger: pino({ level: 'silent' }),
    socketDir: root,
    onChange: () => undefined,
    onExit: (exit) => exits.push(exit),
    outside,
  });
  return { models, outside, events, exits };
}

/** Until `check` holds, letting fake exits and awaited promises run. */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !check(); i++) await new Promise((resolve) => setImmediate(resolve));
  if (!check()) throw new Error('never happened');
}

t.test("the model's state follows its instances", async (t) => {
  const { models, outside } = pool(t);
  models.start();
  t.equal(models.state, 'loading');
  t.equal(models.info, null);
  outside.forked[1].ready();
  t.equal(models.state, 'ready', 'one ready instance is enough');
  t.equal(models.info?.pid, outside.forked[1].pid);
  const fail = (proc: FakeWorkerProcess) => proc.failLoad('bad graph', 'TILE_ERR_MODEL_LOAD');
  fail(outside.forked[0]);
  t.equal(models.state, 'ready');
  fail(outside.forked[1]);
  t.equal(models.state, 'failed', 'every instance failed');
  t.match(models.view(), {
    name: 'gene-expr',
    state: 'failed',
    reason: 'load failed [TILE_ERR_MODEL_LOAD]: bad graph',
    info: null,
  });
  await models.stop(1000);
  t.equal(models.state, 'stopped');
});

t.test('a reload replaces one instance at a time: each replacement is ready before the old one stops', async (t) => {
  const { models, outside, events } = pool(t);
  models.start();
  outside.forked.forEach((p) => p.ready());
  const before = models.workers.slice();
  const reload = models.reload();
  await until(() => outside.forked.length === 3);
  t.same(before[0].state, 'ready', 'the old instance serves while its replacement loads');
  outside.forked[2].ready();
  await until(() => outside.forked.length === 4);
  t.not(models.workers[0], before[0], 'the replacement took slot 0');
  t.equal(models.workers[1], before[1], 'slot 1 untouched until its turn');
  outside.forked[3].ready();
  await reload;
  t.same(events, ['fork p0', 'fork p1', 'fork p2', 'stop p0', 'exit p0', 'fork p3', 'stop p1', 'exit p1']);
  t.same(
    models.workers.map((w) => w.pid),
    [outside.forked[2].pid, outside.forked[3].pid],
  );
  t.same(
    before.map((w) => w.state),
    ['stopped', 'stopped'],
  );
  t.equal(models.state, 'ready');

  // A promoted replacement is restarted like any instance.
  outside.forked[2].exit(1);
  t.equal(models.workers[0].state, 'restarting');
});

t.test('a replacement that fails to load leaves the old instance serving, and says so', async (t) => {
  const { models, outside, events, exits } = pool(t);
  models.start();
  outside.forked.forEach((p) => p.ready());
  const before = models.workers.slice();
  const reload = models.reload();
  await until(() => outside.forked.length === 3);
  outside.forked[2].failLoad('bad graph', 'TILE_ERR_MODEL_LOAD');
  await until(() => outside.forked.length === 4);
  outside.forked[3].ready();
  await reload;
  t.equal(models.workers[0], before[0], 'slot 0 kept its worker');
  t.equal(before[0].state, 'ready');
  t.equal(before[0].lastError, 'reload failed: load failed [TILE_ERR_MODEL_LOAD]: bad graph');
  t.equal(models.workers[1].pid, outside.forked[3].pid, 'the next slot was still replaced');
  t.same(events, ['fork p0', 'fork p1', 'fork p2', 'exit p2', 'fork p3', 'stop p1', 'exit p1']);
  t.equal(exits.length, 2);
  outside.clock.advance(60000);
  t.equal(outside.forked.length, 4, 'the failed replacement is not restarted');
});

t.test('a reload retries a failed instance in place; a stop during a reload stops the replacement too', async (t) => {
  const { models, outside, events } = pool(t);
  models.start();
  outside.forked[0].failLoad('bad graph', 'TILE_ERR_MODEL_LOAD');
  outside.forked[1].ready();
  const failed = models.workers[0];
  t.equal(failed.state, 'failed');
  const reload = models.reload();
  t.equal(models.workers[0], failed, 'the same instance');
  t.equal(failed.state, 'loading', 'tried again at once');
  await until(() => outside.forked.length === 4);
  t.same(events, ['fork p0', 'fork p1', 'exit p0', 'fork p2', 'fork p3']);
  await models.stop(1000);
  await reload;
  t.same(
    outside.forked.map((p) => p.exited),
    [true, true, true, true],
    'every process stopped, the loading replacement included',
  );
  t.equal(models.workers[1].pid, null);
  t.equal(models.state, 'stopped');
});

t.test("a reload keeps each slot's restart count: the replacement counts on from its predecessor's", async (t) => {
  const { models, outside } = pool(t);
  models.start();
  outside.forked.forEach((p) => p.ready());
  outside.forked[0].exit(1);
  outside.clock.advance(SUPERVISOR.restart_max_delay_ms);
  await until(() => outside.forked.length === 3);
  outside.forked[2].ready();
  t.same(
    models.view().instances.map((i) => i.restarts),
    [1, 0],
  );
  const reload = models.reload();
  await until(() => outside.forked.length === 4);
  outside.forked[3].ready();
  await until(() => outside.forked.length === 5);
  outside.forked[4].ready();
  await reload;
  t.same(
    models.workers.map((w) => w.pid),
    [outside.forked[3].pid, outside.forked[4].pid],
    'both slots replaced',
  );
  t.same(
    models.view().instances.map((i) => i.restarts),
    [1, 0],
    'since the start, not since the reload',
  );
  // And counted on by the replacement.
  outside.forked[3].exit(1);
  t.same(
    models.view().instances.map((i) => i.restarts),
    [2, 0],
  );
  await models.stop(1000);
});
