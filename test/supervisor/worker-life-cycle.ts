// The worker life cycle in-process: the real WorkerLifeCycle with fork and the clock replaced
// (test/helpers/fake-worker-process.ts), so restarts, backoff, exit causes, hangs, the failed
// state and stopping run in milliseconds. test/e2e/supervision.test.ts does the same with real
// processes.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import type { ServiceConfig } from '../../src/config/config.js';
import { classifyExit, describeExit } from '../../supervisor/exit-cause.js';
import { FAULT_EXIT_MS, LOAD_DEATHS_TO_FAIL, WorkerLifeCycle } from '../../supervisor/worker-life-cycle.js';
import { FakeOutside, SUPERVISOR } from '../helpers/fake-worker-process.js';

/** A life cycle of a package folder in the test's directory, started, with its fake outside. */
function started(t: Test, config: Partial<ServiceConfig['supervisor']> = {}) {
  const dir = t.testdir({ 'manifest.json': '{}', 'model.onnx': 'graph' });
  const outside = new FakeOutside();
  const worker = new WorkerLifeCycle({
    model: 'gene-expr',
    dir,
    instance: 0,
    gpu: null,
    gpuInfo: undefined,
    provider: 'auto',
    batchShapes: 'auto',
    intraOpThreads: 1,
    decodeThreads: 1,
    maxBatch: 0,
    maxDelayMs: 0,
    maxHeld: 64,
    socketPath: (generation) => `/tmp/gene-expr-0-${generation}.sock`,
    dataDir: dir,
    config: { ...SUPERVISOR, ...config },
    logger: pino({ level: 'silent' }),
    autoRestart: true,
    outside,
  });
  const states: string[] = [];
  worker.on('change', () => states.push(worker.state));
  worker.start();
  return { worker, outside, clock: outside.clock, dir, states };
}

/** The ms from now until the next fork (the restart delay). */
function msUntilFork(outside: FakeOutside, limit = 1_000_000): number {
  const before = outside.forked.length;
  for (let ms = 0; ms <= limit; ms++) {
    if (outside.forked.length > before) return ms;
    outside.clock.advance(1);
  }
  throw new Error(`no fork within ${limit} ms`);
}

/** Lets the fake processes' exits (a later turn, as real ones) arrive. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

t.test('a ready worker serves from its socket; the view and the diagnostics snapshot agree', async (t) => {
  const { worker, outside, states } = started(t);
  t.equal(worker.state, 'loading');
  t.equal(worker.view().socket, null, 'no socket while loading');
  outside.last.ready({ socket: '/tmp/s.sock' });
  t.equal(worker.state, 'ready');
  t.same(states, ['ready'], 'loading is the initial state');
  const view = worker.view();
  t.match(view, {
    id: 'gene-expr#0',
    pid: outside.last.pid,
    state: 'ready',
    socket: '/tmp/s.sock',
    restarts: 0,
    provider: 'cpu',
    loadMs: 120,
    lastError: null,
  });
  const snap = worker.snapshot();
  // strictSame on the keys themselves: t.match would take a missing key for null and any array for [].
  const { id, pid, state, gpu, provider, provider_skipped, adapter, load_ms, warmup, restarts, last_error } = snap;
  t.strictSame(
    { id, pid, state, gpu, provider, provider_skipped, adapter, load_ms, warmup, restarts, last_error },
    {
      id: view.id,
      pid: view.pid,
      state: view.state,
      gpu: view.gpu,
      provider: view.provider,
      provider_skipped: view.providerSkipped,
      adapter: view.adapter,
      load_ms: view.loadMs,
      warmup: view.warmup,
      restarts: view.restarts,
      last_error: view.lastError,
    },
    'the view and the snapshot agree, key for key',
  );
  t.match(snap, { model: 'gene-expr', instance: 0, intra_op_threads: 1, sha256: 'f'.repeat(64) });
  t.equal(snap.last_exit, null, 'no exit yet');
});

t.test(
  'a crashing worker is restarted after a delay that doubles to the cap and resets after a long run',
  async (t) => {
    const { worker, outside, clock } = started(t, { restart_reset_after_ms: 5000, heartbeat_timeout_ms: 60000 });
    outside.last.ready(); // once ready, it is restarted however often it dies loading again
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      outside.last.exit(1);
      t.equal(worker.state, 'restarting');
      delays.push(msUntilFork(outside));
      t.equal(worker.state, 'loading');
    }
    t.same(delays, [100, 200, 400, 800, 1000, 1000]);
    t.equal(worker.restarts, 6);
    t.equal(worker.lastError, 'exited with code 1');
    t.match(worker.lastExit, { code: 1, signal: null, external: false, device_fault: false });
    outside.last.ready();
    clock.advance(5000);
    outside.last.exit(1);
    t.equal(msUntilFork(outside), 100, 'up for restart_reset_after_ms: back to the first delay');
    outside.last.exit(1);
    t.equal(msUntilFork(outside), 200);
    t.equal(outside.forked.length, 9, 'one process per start, none left over');
  },
);

t.test(
  'exit causes: killed from outside, crashed by a signal, a device fault, a device fault that hangs',
  async (t) => {
    const { worker, outside, clock } = started(t);
    outside.last.ready();
    outside.last.exit(null, 'SIGKILL');
    t.match(worker.lastExit, { signal: 'SIGKILL', external: true, device_fault: false });
    t.equal(worker.lastError, 'exited with signal SIGKILL');

    msUntilFork(outside);
    outside.last.exit(null, 'SIGSEGV');
    t.match(worker.lastExit, { signal: 'SIGSEGV', external: false, device_fault: false }, 'a crash of its own');

    msUntilFork(outside);
    outside.last.ready();
    outside.last.report({ type: 'device-fault', reason: 'CUDA failure 700' });
    t.equal(worker.state, 'restarting', 'out of routing before it exits');
    t.equal(worker.view().socket, null);
    outside.last.exit(5);
    t.match(worker.lastExit, { code: 5, external: false, device_fault: true });
    t.equal(worker.lastError, 'device fault: CUDA failure 700');

    msUntilFork(outside);
    const stuck = outside.last;
    stuck.ready();
    stuck.report({ type: 'device-fault', reason: 'CUDA failure 999' });
    clock.advance(FAULT_EXIT_MS - 1);
    t.same(stuck.signals, [], 'time to answer what it holds');
    clock.advance(1);
    t.same(stuck.signals, ['SIGKILL'], 'killed when it does not exit');
    await turn();
    t.match(
      worker.lastExit,
      { signal: 'SIGKILL', external: false, device_fault: true },
      'our own kill is not external',
    );
    t.equal(worker.state, 'restarting');
  },
);

t.test('a worker without heartbeats is killed; heartbeats keep it; a load that never ends is killed', async (t) => {
  const { worker, outside, clock } = started(t);
  outside.last.ready();
  for (let i = 0; i < 30; i++) {
    clock.advance(100);
    outside.last.report({ type: 'heartbeat' });
  }
  t.same(outside.last.signals, [], 'beating for 3 s: alive');
  clock.advance(1100);
  t.same(outside.last.signals, ['SIGKILL']);
  await turn();
  t.match(worker.lastError, /^no heartbeat for \d+ ms; killed$/);
  t.match(worker.lastExit, { external: false, device_fault: false });

  msUntilFork(outside);
  clock.advance(5000);
  t.same(outside.last.signals, [], 'loading: the load timeout, not the heartbeat timeout');
  clock.advance(100);
  t.same(outside.last.signals, ['SIGKILL']);
  await turn();
  t.equal(worker.lastError, 'still loading after 5000 ms; killed');
  t.equal(worker.state, 'restarting');
});

t.test('a package that cannot load is failed until its files change, the slow retry, or retryNow', async (t) => {
  const { worker, outside, clock, dir } = started(t);
  const loadFails = (packageFault: boolean) => {
    outside.last.failLoad('manifest.json: not JSON', 'TILE_ERR_PACKAGE_MANIFEST_UNREADABLE', packageFault);
  };
  loadFails(true);
  t.equal(worker.state, 'failed');
  t.equal(worker.lastError, 'load failed [TILE_ERR_PACKAGE_MANIFEST_UNREADABLE]: manifest.json: not JSON');
  t.equal(worker.restarts, 1);
  clock.advance(60000);
  t.equal(outside.forked.length, 1, 'the same files are not tried again at once');
  writeFileSync(join(dir, 'manifest.json'), '{"name": "gene-expr"}');
  clock.advance(SUPERVISOR.package_poll_ms);
  t.equal(outside.forked.length, 2, 'changed files: tried again at the next poll');
  t.equal(worker.state, 'loading');

  loadFails(true);
  t.equal(worker.state, 'failed');
  clock.advance(SUPERVISOR.failed_retry_ms - SUPERVISOR.package_poll_ms);
  t.equal(outside.forked.length, 2);
  clock.advance(SUPERVISOR.package_poll_ms);
  t.equal(outside.forked.length, 3, 'tried again after failed_retry_ms');

  loadFails(true);
  worker.retryNow();
  t.equal(outside.forked.length, 4, 'retryNow (SIGHUP) tries at once');
  worker.retryNow();
  t.equal(outside.forked.length, 4, 'retryNow does nothing to a worker that is not failed');

  loadFails(false);
  t.equal(worker.state, 'restarting', 'a load failure that is not the package: restarted with backoff');
  t.ok(msUntilFork(outside) > 0);
});

t.test(
  'a worker that dies while loading, never ready, is failed at the third death in a row with the exit and its stderr',
  async (t) => {
    const { worker, outside, clock, dir } = started(t, { heartbeat_timeout_ms: 60000 });
    // As a V8 heap OOM at every load (batch.max 1e9 once): it never sends load-failed, and was
    // restarted forever while readiness said "loading" with no reason.
    const oom = async () => {
      outside.last.stderr.write('<--- Last few GCs --->\n');
      outside.last.stderr.write('FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n');
      outside.last.stderr.write(
        '----- Native stack trace -----\n 1: 0xb8d0a3 node::OOMErrorHandler(char const*) [node]\n',
      );
      await turn();
      outside.last.exit(null, 'SIGABRT');
    };
    for (let death = 1; death < LOAD_DEATHS_TO_FAIL; death++) {
      await oom();
      t.equal(worker.state, 'restarting', `death ${death}: restarted`);
      msUntilFork(outside);
    }
    await oom();
    t.equal(worker.state, 'failed');
    t.equal(
      worker.lastError,
      'load failed [TILE_ERR_MODEL_LOAD]: exited with signal SIGABRT while loading, 3 times in a row and never ready; stderr: FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory',
    );
    t.equal(worker.view().lastError, worker.lastError, 'the reason readiness and /api/models give');
    clock.advance(60000);
    t.equal(outside.forked.length, LOAD_DEATHS_TO_FAIL, 'not restarted at the backoff cap');

    // Lines after the exit still complete the reason (a long OOM report can outlast the exit event).
    writeFileSync(join(dir, 'manifest.json'), '{"name": "gene-expr", "v": 2}');
    clock.advance(SUPERVISOR.package_poll_ms);
    t.equal(worker.state, 'loading', 'changed files: tried again');
    outside.last.exit(134);
    outside.last.stderr.write('Error: late line\n');
    await turn();
    t.equal(worker.state, 'failed', 'still dying: failed again at once');
    t.match(
      worker.lastError,
      /^load failed \[TILE_ERR_MODEL_LOAD\]: exited with code 134 while loading, 4 times in a row and never ready; stderr: Error: late line$/,
    );

    // A load that gets through resets the count; a worker that was ready is restarted as before.
    worker.retryNow();
    outside.last.ready();
    for (let i = 0; i < LOAD_DEATHS_TO_FAIL + 2; i++) {
      outside.last.exit(null, 'SIGABRT');
      t.equal(worker.state, 'restarting');
      msUntilFork(outside);
    }
  },
);

t.test('stop: the worker is asked to finish, killed after the grace, and never restarted', async (t) => {
  const { worker, outside, clock } = started(t);
  outside.last.ready();
  await worker.stop(2000);
  t.same(outside.last.sent, [{ type: 'stop' }]);
  t.equal(worker.state, 'stopped');
  t.equal(worker.lastError, null, 'a stop is not an error');
  clock.advance(60000);
  t.equal(outside.forked.length, 1, 'not restarted');
  t.equal(clock.timers, 0, 'no watchdog or restart timer left');

  const other = started(t);
  other.outside.onStop = () => undefined;
  other.outside.last.ready();
  const stopping = other.worker.stop(2000);
  t.equal(other.worker.state, 'stopping');
  other.clock.advance(1999);
  t.same(other.outside.last.signals, []);
  other.clock.advance(1);
  t.same(other.outside.last.signals, ['SIGKILL'], 'killed at the grace');
  await stopping;
  t.equal(other.worker.state, 'stopped');
  t.match(other.worker.lastExit, { external: false, device_fault: false });
});

t.test('probes are answered by the worker, and settled when it exits', async (t) => {
  const { worker, outside } = started(t);
  const answered = worker.probe(500);
  const { id } = outside.last.sent[0] as { id: number };
  outside.last.report({ type: 'probe', id, data: { queue: 0 } });
  t.same(await answered, { queue: 0 });
  const pending = worker.probe(500);
  outside.last.exit(1);
  t.same(await pending, { error: 'worker exited' });
  t.same(await worker.probe(500), { error: 'worker is restarting' });
});

t.test('classifyExit: the verdict first, then a stop, then the signal', async (t) => {
  const fault = { kind: 'device-fault', reason: 'CUDA failure 700' } as const;
  t.same(classifyExit(fault, false, null, 'SIGKILL'), fault);
  t.same(classifyExit(fault, true, 0, null), fault, 'stopped after a fault: still the fault');
  t.same(classifyExit({ kind: 'hung', reason: 'no heartbeat' }, false, null, 'SIGKILL'), {
    kind: 'hung',
    reason: 'no heartbeat',
  });
  t.same(classifyExit(null, true, null, 'SIGKILL'), { kind: 'stopped' });
  for (const signal of ['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGQUIT', 'SIGHUP'])
    t.same(classifyExit(null, false, null, signal), { kind: 'external', signal });
  t.same(classifyExit(null, false, null, 'SIGSEGV'), { kind: 'crashed', code: null, signal: 'SIGSEGV' });
  t.same(classifyExit(null, false, 3, null), { kind: 'crashed', code: 3, signal: null });
  t.equal(describeExit({ kind: 'crashed', code: 3, signal: null }), 'exited with code 3');
  t.equal(
    describeExit({ kind: 'load-failed', reason: 'bad graph', code: 'TILE_ERR_MODEL_LOAD' }),
    'load failed [TILE_ERR_MODEL_LOAD]: bad graph',
  );
});
