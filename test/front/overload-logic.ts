// Admission by expected wait (src/front/admission.ts), the front's byte budget (queue-share.ts)
// and its holders' pace (pace.ts), the batcher's deadlines
// (src/worker/batcher.ts) and the worker's lazy decode (src/worker/decode-window.ts), in-process
// on an injected clock: milliseconds, no processes.
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/config.js';
import { QueueShare } from '../../src/front/queue-share.js';
import { ANY_RATE, MIN_RATE, Pace, WINDOW_MS } from '../../src/front/pace.js';
import {
  arrivingTiles,
  Backlog,
  decide,
  expectedMs,
  FRESH_MS,
  IDLE_FRESH_MS,
  places,
} from '../../src/front/admission.js';
import { Batcher } from '../../src/worker/batcher.js';
import { fits } from '../helpers/budget.js';
import { DecodeWindow } from '../../src/worker/decode-window.js';

function clock(start = 1_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

t.test('admission: the share, then the expected wait against the deadline', async (t) => {
  const c = clock();
  const backlog = new Backlog(c.now);
  const one = (inflight: number) => [{ backlog, inflight }];
  t.same(
    decide({ held: 0, arriving: 0, places: 10, timeoutMs: 300, instances: one(0) }),
    { admit: true },
    'no estimate yet: admitted',
  );
  t.match(
    decide({ held: 10, arriving: 0, places: 10, timeoutMs: 300, instances: one(10) }),
    { admit: false, reason: 'places' },
    'the share bounds it even without an estimate',
  );

  backlog.update({ queued: 5, held: 5, batchMs: 50, maxBatch: 1 });
  t.equal(expectedMs({ backlog, inflight: 5 }, 0), 300, 'five tiles ahead, batches of one: five batches, then its own');
  t.same(
    decide({ held: 4, arriving: 0, places: 100, timeoutMs: 300, instances: one(4) }),
    { admit: true },
    'able to finish by the deadline: admitted',
  );
  backlog.update({ queued: 10, held: 10, batchMs: 50, maxBatch: 1 });
  const refused = decide({ held: 10, arriving: 0, places: 100, timeoutMs: 300, instances: one(10) });
  t.match(refused, { admit: false, reason: 'wait', waitMs: 550, retryAfterS: 1 }, 'ten ahead: cannot finish in 300 ms');

  c.advance(300);
  t.equal(backlog.queued(), 4, 'the report drains at the worker pace');
  t.same(
    decide({ held: 4, arriving: 0, places: 100, timeoutMs: 300, instances: one(4) }),
    { admit: true },
    'and admits again once it has',
  );

  backlog.update({ queued: 40, held: 40, batchMs: 100, maxBatch: 8 });
  t.equal(expectedMs({ backlog, inflight: 0 }, 0), 600, 'batches of eight: five batches ahead and its own');
  t.match(decide({ held: 0, arriving: 0, places: 100, timeoutMs: 300, instances: one(0) }), {
    admit: false,
    retryAfterS: 1,
  });
  backlog.update({ queued: 400, held: 400, batchMs: 100, maxBatch: 8 });
  t.match(
    decide({ held: 0, arriving: 0, places: 100, timeoutMs: 300, instances: one(0) }),
    { retryAfterS: 5 },
    'Retry-After from the estimate: 5.1 s wait - 0.3 s',
  );

  const idle = new Backlog(c.now);
  idle.update({ queued: 0, held: 0, batchMs: 5000, maxBatch: 1 });
  t.same(
    decide({ held: 0, arriving: 0, places: 100, timeoutMs: 300, instances: [{ backlog: idle, inflight: 0 }] }),
    { admit: true },
    'an idle instance always takes a tile (its worker judges it)',
  );
  t.same(
    decide({
      held: 3,
      arriving: 0,
      places: 100,
      timeoutMs: 300,
      instances: [
        { backlog, inflight: 3 },
        { backlog: idle, inflight: 0 },
      ],
    }),
    { admit: true },
    'the least loaded instance decides',
  );
  const unsent = decide({
    held: 0,
    arriving: 20,
    places: 100,
    timeoutMs: 300,
    instances: [{ backlog: idle, inflight: 0 }],
  });
  t.match(unsent, { admit: false, reason: 'wait' }, 'requests whose bodies are arriving count as ahead');
  t.same(
    decide({ held: 0, arriving: 200, places: 10, timeoutMs: 60000, instances: one(0) }),
    { admit: true },
    'but hold no place of the share (a stalled upload)',
  );
});

t.test("places: a front's share of max_queue, and the room the other fronts leave by recent reports", async (t) => {
  const c = clock();
  const a = new Backlog(c.now);
  const b = new Backlog(c.now);
  const at = (backlog: Backlog, inflight = 0) => ({ backlog, inflight });
  t.equal(places(32, 128, [at(a)]), 32, 'no report yet: the share');
  a.update({ queued: 10, held: 20, batchMs: 10, maxBatch: 16 }, 20);
  t.equal(places(32, 128, [at(a)]), 128, "every tile at the worker was this front's: the whole queue");
  a.update({ queued: 10, held: 20, batchMs: 10, maxBatch: 16 }, 5);
  t.equal(places(32, 128, [at(a, 40)]), 113, 'the other fronts held 15 there (by the count when the report came)');
  a.update({ queued: 100, held: 120, batchMs: 10, maxBatch: 16 }, 10);
  t.equal(places(32, 128, [at(a)]), 32, 'they hold 110: this front keeps its share, never less');
  a.update({ queued: 2, held: 2, batchMs: 10, maxBatch: 16 });
  c.advance(FRESH_MS + 1);
  t.equal(places(32, 128, [at(a)]), 32, "a busy worker's report older than FRESH_MS: the share");
  a.update({ queued: 0, held: 0, batchMs: 10, maxBatch: 16 });
  c.advance(FRESH_MS + 1);
  t.equal(places(32, 128, [at(a)]), 128, "an idle worker's, which reports only every second: the whole queue");
  c.advance(IDLE_FRESH_MS - FRESH_MS);
  t.equal(places(32, 128, [at(a)]), 32, 'older than IDLE_FRESH_MS: the share');
  const slow = new Backlog(c.now);
  slow.update({ queued: 0, held: 4, batchMs: 600, maxBatch: 16 });
  c.advance(1000);
  t.equal(places(32, 128, [at(slow)]), 124, 'for a worker whose batch takes 600 ms, two batch times');
  b.update({ queued: 0, held: 0, batchMs: 10, maxBatch: 16 });
  t.equal(places(32, 128, [at(slow), at(b)]), 124, 'over every ready instance');
  t.equal(places(32, 128, [at(slow), at(a)]), 32, 'one of them without a recent report: the share');
  t.equal(places(32, 128, []), 32, 'no ready instance: the share');
  const cold = new Backlog(c.now);
  cold.update({ queued: 0, held: 0, batchMs: null, maxBatch: 16 });
  t.equal(places(16, 64, [at(cold)]), 64, 'a worker with no batch time yet (idle for 5 s) reports what it holds');
  const half = new Backlog(c.now);
  half.update({ queued: 0, held: 0, maxHeld: 32, batchMs: 10, maxBatch: 16 });
  t.equal(places(16, 64, [at(half)]), 32, 'one of two instances ready: no more than it holds');
  t.equal(places(48, 64, [at(half)]), 32, 'even where the share is more');
  t.equal(places(16, 64, [at(a)], 2), 18, 'with slack (several fronts): the share and two tiles');
  t.equal(places(16, 64, [at(b, 40)], 2), 66, 'the room the others leave, and two tiles');
  t.equal(places(16, 64, [at(half)], 2), 32, 'never more than the instances hold');
  t.match(
    decide({ held: 40, arriving: 0, places: places(32, 128, [at(b, 40)]), timeoutMs: 300, instances: [at(b, 40)] }),
    { admit: true },
    'a front past its share is admitted while the queue has room',
  );
});

t.test('arriving uploads count ahead in the measure that their bodies have come, until a deadline old', async (t) => {
  const burst = Array.from({ length: 10 }, () => ({ tiles: 1, since: 1000, arrived: () => 1 }));
  const stalled = Array.from({ length: 64 }, () => ({ tiles: 1, since: 1000, arrived: () => 15 / 2 ** 24 }));
  t.equal(arrivingTiles(burst, 1001, 300), 10, "a burst's bodies, here at once: whole");
  t.ok(arrivingTiles(stalled, 1001, 300) < 0.001, '64 uploads stalled after 15 bytes of 16 MB: nothing');
  t.equal(arrivingTiles([{ tiles: 4, since: 1000, arrived: () => 0.5 }], 1001, 300), 2, 'half of a body of 4 tiles');
  t.equal(arrivingTiles(burst, 1300, 300), 0, 'a deadline after admission: a slow upload, no longer ahead');
});

t.test('batcher: a full batch runs at once, a partial one after the delay; one run at a time', async (t) => {
  const ran: number[][] = [];
  let running = 0;
  let most = 0;
  let release: () => void = () => {};
  const batcher = new Batcher<number>({
    maxBatch: 3,
    maxDelayMs: 30,
    deadline: () => Infinity,
    expire: () => {},
    run: async (batch) => {
      ran.push(batch);
      most = Math.max(most, ++running);
      await new Promise<void>((resolve) => (release = resolve));
      running--;
    },
  });
  const step = async () => {
    release();
    await new Promise((resolve) => setImmediate(resolve));
  };
  batcher.push(1);
  batcher.push(2);
  t.same(ran, [], 'two of three: they wait for the delay');
  batcher.push(3);
  t.same(ran, [[1, 2, 3]], 'the third fills the batch: it runs at once');
  for (const n of [4, 5, 6, 7]) batcher.push(n);
  t.equal(ran.length, 1, 'one run at a time');
  await step();
  t.same(ran.at(-1), [4, 5, 6], 'the next at once, of what arrived meanwhile, at most a full batch');
  await step();
  t.same(ran.at(-1), [7], 'then the rest, without the delay: it has waited already');
  await step();
  batcher.push(8);
  await new Promise((resolve) => setTimeout(resolve, 10));
  t.equal(ran.length, 3, 'an idle batcher holds a partial batch for the delay');
  await new Promise((resolve) => setTimeout(resolve, 60));
  t.same(ran.at(-1), [8], 'and runs it after');
  await step();
  await batcher.idle();
  t.equal(most, 1, 'never two runs at once');
});

t.test('batcher: a full batch waiting behind a run is prepared during it, and run with what was made', async (t) => {
  const c = clock();
  const ran: [number[], string | undefined][] = [];
  const prepared: number[][] = [];
  const handedBack: string[] = [];
  const expired: number[] = [];
  const deadlines = new Map<number, number>();
  let release: () => void = () => {};
  const batcher = new Batcher<number, string>({
    clock: c.now,
    maxBatch: 2,
    maxDelayMs: 0,
    deadline: (n) => deadlines.get(n) ?? Infinity,
    expire: (n) => expired.push(n),
    prepare: (batch) => (prepared.push(batch), `feeds of ${batch.join('+')}`),
    unprepare: (feeds) => handedBack.push(feeds),
    run: async (batch, feeds) => {
      ran.push([batch, feeds]);
      await new Promise<void>((resolve) => (release = resolve));
    },
  });
  const step = async () => {
    release();
    await new Promise((resolve) => setImmediate(resolve));
  };
  batcher.push(1);
  t.same(ran, [[[1], undefined]], 'an idle batcher runs at once, preparing at its run');
  batcher.push(2);
  t.same(prepared, [], 'not a full batch: nothing prepared');
  batcher.push(3);
  t.same(prepared, [[2, 3]], 'a full batch behind the run: prepared now');
  batcher.push(4);
  t.equal(batcher.pending, 3, 'prepared or not, they are waiting');
  t.same(prepared.length, 1, 'one batch prepared ahead at most');
  await step();
  t.same(ran.at(-1), [[2, 3], 'feeds of 2+3'], 'the prepared batch runs with its feeds');

  batcher.push(5);
  t.same(prepared.at(-1), [4, 5]);
  t.ok(batcher.remove(4), 'an item of the prepared batch can still be taken out');
  t.same(prepared.length, 2, 'its preparation is dropped');
  t.same(handedBack, ['feeds of 4+5'], '...and handed back');
  batcher.push(6);
  t.same(prepared.at(-1), [5, 6], 'and the batch is formed again');
  await step();
  t.same(ran.at(-1), [[5, 6], 'feeds of 5+6']);

  // A prepared batch one of whose items can no longer finish after the run before it ran long.
  for (const n of [7, 8]) batcher.push(n);
  t.same(prepared.at(-1), [7, 8]);
  deadlines.set(7, c.now() + 10);
  c.advance(20);
  await step();
  t.same(expired, [7], 'the late item is dropped, never run');
  t.same(ran.at(-1), [[8], undefined], 'the rest formed again and prepared at their run');
  t.same(handedBack, ['feeds of 4+5', 'feeds of 7+8'], 'the dropped preparation handed back');
  t.equal(prepared.length - handedBack.length, ran.filter(([, feeds]) => feeds).length, 'every other one ran');
  await step();
  await batcher.idle();
});

/** A batcher preparing ahead on a fake clock, whose runs last until step(). */
function preparing(prepare: (batch: number[]) => string = (b) => b.join('+')) {
  const c = clock();
  const ran: number[][] = [];
  const expired: number[] = [];
  const pendingAtExpire: number[] = [];
  const deadlines = new Map<number, number>();
  let release: () => void = () => {};
  const batcher: Batcher<number, string> = new Batcher<number, string>({
    clock: c.now,
    maxBatch: 2,
    maxDelayMs: 0,
    deadline: (n) => deadlines.get(n) ?? Infinity,
    expire: (n) => (expired.push(n), pendingAtExpire.push(batcher.pending)),
    prepare,
    run: async (batch) => {
      ran.push(batch);
      await new Promise<void>((resolve) => (release = resolve));
    },
  });
  const step = async () => {
    release();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { c, ran, expired, pendingAtExpire, deadlines, batcher, step };
}

t.test('batcher, preparing ahead: deadlines from when the running batch ends, by its estimate', async (t) => {
  const m = preparing();
  for (let i = 0; i < 3; i++) {
    m.batcher.push(100 + i);
    m.c.advance(100);
    await m.step();
  }
  t.equal(m.batcher.batchMs, 100);
  m.batcher.push(1);
  const t0 = m.c.now();
  m.c.advance(90);
  m.deadlines.set(2, t0 + 250).set(3, t0 + 250);
  m.batcher.push(2);
  m.batcher.push(3);
  t.same(m.expired, [], 'arrived late in the run: they can still finish after it, by t0 + 200');
  m.c.advance(10);
  await m.step();
  t.same(m.ran.at(-1), [2, 3]);
  await m.step();
  await m.batcher.idle();
});

t.test('batcher, preparing ahead: an expiry leaves a part batch queued, and counted', async (t) => {
  const m = preparing();
  m.batcher.push(1);
  m.deadlines.set(2, m.c.now() + 5);
  m.batcher.push(2);
  m.c.advance(10);
  m.batcher.push(3);
  t.same(m.expired, [2]);
  t.same(m.pendingAtExpire, [1], 'expire sees the tile still waiting');
  m.batcher.push(4);
  for (let i = 0; i < 3; i++) await m.step();
  await m.batcher.idle();
  t.same(m.ran, [[1], [3, 4]], 'the tile that came later in the run joined it');
});

t.test('batcher, preparing ahead: a preparation that throws leaves its items to their run', async (t) => {
  const m = preparing((b) => {
    if (b.includes(3)) throw new Error('preprocess failed');
    return b.join('+');
  });
  m.batcher.push(1);
  m.batcher.push(2);
  m.batcher.push(3);
  t.equal(m.batcher.pending, 2, 'still queued');
  for (let i = 0; i < 3; i++) await m.step();
  await m.batcher.idle();
  t.same(m.ran, [[1], [2, 3]], 'run (where the worker fails them with the reason)');
});

t.test('batcher: tiles that cannot finish by their deadline are dropped, never run', async (t) => {
  const c = clock();
  const ran: number[][] = [];
  const expired: number[] = [];
  let release: () => void = () => {};
  const batcher = new Batcher<{ n: number; deadline: number }>({
    maxBatch: 2,
    maxDelayMs: 0,
    clock: c.now,
    deadline: (item) => item.deadline,
    expire: (item) => expired.push(item.n),
    run: async (batch) => {
      ran.push(batch.map((b) => b.n));
      // Each batch takes 100 ms of the injected clock, ended by the test.
      await new Promise<void>((resolve) => (release = resolve));
      c.advance(100);
    },
  });
  const step = async () => {
    release();
    await new Promise((resolve) => setImmediate(resolve));
  };
  // Three batches to learn the batch time (100 ms).
  for (let i = 0; i < 3; i++) {
    batcher.push({ n: i, deadline: Infinity });
    await step();
  }
  await step();
  t.equal(batcher.batchMs, 100, 'the recent batch time');
  t.same(ran, [[0], [1], [2]]);

  // A batch runs; meanwhile tiles queue with deadlines 50, 150 and 250 ms from now.
  batcher.push({ n: 10, deadline: Infinity });
  const now = c.now();
  for (const [n, ms] of [
    [11, 50],
    [12, 150],
    [13, 250],
    [14, 400],
  ])
    batcher.push({ n, deadline: now + ms });
  await step();
  // The first batch ended at now + 100: 11 has expired, 12 (150) cannot finish by now + 200.
  t.same(expired, [11, 12], 'expired, and unable to finish in time: dropped when the next batch forms');
  t.same(ran.at(-1), [13, 14], 'the next batch is of tiles that can still finish');
  await step();

  batcher.push({ n: 20, deadline: Infinity });
  const queued = { n: 21, deadline: Infinity };
  batcher.push(queued);
  t.ok(batcher.remove(queued), 'a queued tile whose client left is taken out');
  t.notOk(batcher.remove(queued), 'once');
  await step();
  await step();
  t.notOk(ran.flat().includes(21), 'and never runs');

  // An expired tile is reported once the queue no longer holds it (the worker then decodes more).
  const seen: number[] = [];
  const watched = new Batcher<{ deadline: number }>({
    maxBatch: 1,
    maxDelayMs: 0,
    clock: c.now,
    deadline: (item) => item.deadline,
    expire: () => seen.push(watched.pending),
    run: async () => {},
  });
  watched.push({ deadline: 0 });
  await watched.idle();
  t.same(seen, [0], 'the queue is empty when its expired tile is reported');

  c.advance(6000);
  t.equal(batcher.batchMs, null, 'a batch time older than its window predicts nothing: the worker measures again');
});

t.test('decode window: tiles wait undecoded until the next batch needs them', async (t) => {
  // Room for two tiles decoding or decoded ahead, as a worker with batches of one has.
  let ahead = 0;
  const started: number[] = [];
  const window = new DecodeWindow<number>({ room: () => 2 - ahead, start: (n) => (started.push(n), ahead++) });
  const tiles = Array.from({ length: 60 }, (_, i) => i);
  for (const n of tiles) window.push(n);
  t.same(started, [0, 1], 'of 60 arriving tiles only two start decoding');
  t.equal(window.length, 58, 'the rest wait undecoded');
  for (const n of tiles.slice(2, 59)) t.ok(window.remove(n), `waiting tile ${n} is cancelled`);
  t.notOk(window.remove(0), 'a tile already started is not waiting');
  t.equal(window.length, 1);
  window.push(100);
  ahead--;
  window.pump();
  t.same(started, [0, 1, 59], 'when a batch leaves, the oldest waiting tile starts');
  ahead--;
  window.pump();
  t.same(started, [0, 1, 59, 100], 'and a new tile starts next: it never waits behind cancelled decodes');

  // A start that drops its tile at once (expired) makes room within the same pump.
  const dropped: number[] = [];
  const dropping = new DecodeWindow<number>({ room: () => 1, start: (n) => (dropped.push(n), dropping.pump()) });
  for (const n of [1, 2, 3]) dropping.push(n);
  t.same(dropped, [1, 2, 3], 'expired tiles are dropped in turn without nesting');
});

/** One front's share of gene-expr's queue, with a byte budget of 2000. */
function budgetedShare(t: Test, now?: () => number): QueueShare {
  const root = t.testdir({
    'config.json': JSON.stringify({
      models: [{ name: 'gene-expr', max_queue: 8 }],
      body_limit_bytes: 2000,
      front: { max_inflight_bytes: 2000 },
    }),
  });
  mkdirSync(join(root, 'models', 'gene-expr'), { recursive: true });
  writeFileSync(join(root, 'models', 'gene-expr', 'manifest.json'), '{}');
  return new QueueShare(loadConfig({ CONFIG: join(root, 'config.json') }, root), 1, () => [], now);
}

t.test("the front's byte budget: a gRPC message's bytes and an admitted body's share it", async (t) => {
  const share = budgetedShare(t);
  const message = share.requestBytes();
  message.received(1200);
  const ticket = share.admit('gene-expr', 1);
  ticket.received(600);
  t.throws(() => ticket.received(400), { code: 'TILE_ERR_FRONT_BUSY' }, '1200 + 600 + 400 is past 2000');
  t.throws(() => message.received(201), { code: 'TILE_ERR_FRONT_BUSY' });
  t.equal(message.bytes(), 1200);
  message.release();
  ticket.received(1400);
  t.throws(() => share.admit('gene-expr', 1), { code: 'TILE_ERR_FRONT_BUSY' }, 'a full budget admits nothing');
  ticket.release();
  t.doesNotThrow(() => share.requestBytes().received(2000), 'all given back');
});

t.test('bytes that arrive after a request is done are held by nobody', async (t) => {
  const share = budgetedShare(t);
  const ticket = share.admit('gene-expr', 1);
  ticket.received(500);
  ticket.release();
  // A body's rest still passing its counter after the answer went (a parser that failed mid-body).
  ticket.received(1500);
  const message = share.requestBytes();
  message.release();
  message.received(1500);
  t.doesNotThrow(() => share.requestBytes().received(2000), 'the budget is whole again');
});

t.test('pace: a holder moving MIN_RATE or more is never behind; one that stops is, WINDOW_MS later', async (t) => {
  // Steps of up to WINDOW_MS, each moving at least MIN_RATE for its time, after any burst.
  fc.assert(
    fc.property(
      fc.nat(64 << 20),
      fc.array(fc.tuple(fc.integer({ min: 1, max: WINDOW_MS }), fc.double({ min: 1, max: 100, noNaN: true }))),
      (burst, steps) => {
        let now = 0;
        const pace = new Pace(now);
        pace.moved(burst, now);
        for (const [ms, faster] of steps) {
          now += ms;
          if (pace.behind(now) > 0) return false;
          pace.moved(Math.ceil((MIN_RATE * faster * ms) / 1000), now);
        }
        return pace.behind(now + WINDOW_MS) <= 0 && pace.behind(now + WINDOW_MS + 1) > 0;
      },
    ),
  );
  // Whatever it sent before: 16 MiB in a burst buys WINDOW_MS, not 16 s.
  const burst = new Pace(0);
  burst.moved(16 << 20, 0);
  t.equal(burst.behind(WINDOW_MS + 1), 1, 'a burst then nothing: behind once WINDOW_MS has passed');
  // A trickle at half the rate, every 100 ms: behind after twice WINDOW_MS, and then throughout.
  const trickle = new Pace(0);
  const behind: number[] = [];
  for (let now = 100; now <= 4 * WINDOW_MS; now += 100) {
    if (trickle.behind(now) > 0) behind.push(now);
    trickle.moved(MIN_RATE / 20, now);
    if (trickle.behind(now) > 0) behind.push(now);
  }
  t.equal(behind[0], 2 * WINDOW_MS, 'a trickle at half MIN_RATE: behind after twice WINDOW_MS');
  t.equal(behind.length, 1 + (2 * (4 * WINDOW_MS - behind[0]!)) / 100, 'and at every moment after it');
});

t.test('a full budget lets go of the holder furthest behind its pace, and only of holders behind it', async (t) => {
  const c = clock();
  const share = budgetedShare(t, c.now);
  const evicted: string[] = [];
  const holder = (name: string, bytes: number) => {
    const held = share.requestBytes(false, { evict: () => evicted.push(name) });
    held.held(bytes);
    return held;
  };
  const stalled = holder('stalled', 500);
  const slower = holder('slower', 500);
  const steady = holder('steady', 500);
  const settledBody = share.admit('gene-expr', 1, {
    declared: 300,
    buffered: () => 0,
    abandon: () => evicted.push('whole body'),
  });
  settledBody.received(300);
  settledBody.arrived();
  const probe = share.requestBytes();
  t.throws(() => probe.received(300), { code: 'TILE_ERR_FRONT_BUSY' }, 'nobody is behind yet: refused');
  c.advance(WINDOW_MS / 2);
  slower.taken(MIN_RATE); // a second's worth, then nothing
  c.advance(WINDOW_MS / 2 + 1);
  steady.taken((MIN_RATE * (WINDOW_MS + 1)) / 1000);
  t.doesNotThrow(() => probe.received(300), 'room made');
  t.same(evicted, ['stalled'], 'the one furthest behind, alone: enough room');
  t.equal(stalled.bytes(), 0, 'its bytes given back');
  t.throws(() => probe.received(700), { code: 'TILE_ERR_FRONT_BUSY' }, 'the slower one is not behind yet');
  c.advance(1000);
  t.doesNotThrow(() => probe.received(700));
  t.same(evicted, ['stalled', 'slower']);
  c.advance(10 * WINDOW_MS);
  probe.received(200); // the budget whole, nobody asked to give way
  t.same(evicted, ['stalled', 'slower']);
  t.doesNotThrow(() => probe.received(1));
  t.same(evicted, ['stalled', 'slower', 'steady'], 'the steady one, once it stopped');
  t.throws(
    () => probe.received(500),
    { code: 'TILE_ERR_FRONT_BUSY' },
    'a body that arrived whole waits for the model, and the probe (no `evict`) is never let go of',
  );
  t.equal(evicted.length, 3);
  probe.release();
  settledBody.release();
  // None is let go of when those behind could not make the room together.
  const small = share.requestBytes(false, { evict: () => evicted.push('small') });
  small.held(500);
  const big = share.requestBytes();
  big.received(1400);
  c.advance(WINDOW_MS + 1);
  t.throws(() => share.requestBytes().received(700), { code: 'TILE_ERR_FRONT_BUSY' });
  t.equal(evicted.length, 3, 'the 500 bytes behind would not have made room for 700 (600 over): kept');
  small.release();
  big.release();
  // An upload still arriving is let go of like an answer, and its own bytes never evict it.
  const upload = share.admit('gene-expr', 1, {
    declared: 1900,
    buffered: () => 0,
    abandon: () => evicted.push('upload'),
  });
  upload.received(1500);
  t.throws(() => upload.received(600), { code: 'TILE_ERR_FRONT_BUSY' }, 'an upload past the budget is refused');
  const next = share.admit('gene-expr', 1);
  // At any rate: 1 byte every WINDOW_MS keeps its place (the front's reading is its pace too).
  c.advance(WINDOW_MS - 1);
  upload.received(0);
  upload.received(1);
  c.advance(WINDOW_MS - 1);
  t.throws(() => next.received(600), { code: 'TILE_ERR_FRONT_BUSY' }, 'a slow upload keeps its place');
  c.advance(2);
  t.doesNotThrow(() => next.received(600), "a new request's body: the stalled upload gives way");
  t.same(evicted.at(-1), 'upload');
});

t.test('holders on one connection give way together; answers waiting for their turn, last', async (t) => {
  const c = clock();
  const share = budgetedShare(t, c.now);
  const evicted: string[] = [];
  const hold = (name: string, bytes: number, queued: boolean, connection: object) => {
    const held = share.requestBytes(false, { evict: () => evicted.push(name), connection, queued });
    held.held(bytes);
    return held;
  };
  // An answer taking its turn slowly, two queued behind it: together 1800 of the 2000 bytes.
  const one = {};
  const active = hold('active', 200, false, one);
  const next = hold('next', 800, true, one);
  const last = hold('last', 800, true, one);
  c.advance(WINDOW_MS + 1);
  t.ok(fits(share, 1500), 'the one taking its turn fell behind: its connection gives way');
  t.same(evicted, ['active', 'next', 'last'], 'every answer on it, the queued ones too');
  t.same([active.bytes(), next.bytes(), last.bytes()], [0, 0, 0], 'their bytes given back');
  // Behind an answer its client takes at pace, a body not sent yet (0 bytes held, behind at any
  // rate once WINDOW_MS has passed) does not make the connection behind.
  const two = {};
  const taken = hold('taken', 1500, false, two);
  const body = share.requestBytes(false, { evict: () => evicted.push('body'), connection: two, rate: ANY_RATE });
  c.advance(WINDOW_MS + 1);
  taken.taken(MIN_RATE * 10);
  t.notOk(fits(share, 600), 'kept: its answer is being taken');
  taken.release();
  body.release();
  // Answers queued behind one its model still works on: let go of last, and only past WINDOW_MS.
  const three = {};
  hold('waiting', 1000, true, three);
  hold('stalled', 500, false, {});
  c.advance(WINDOW_MS);
  t.notOk(fits(share, 1100), 'within WINDOW_MS, nobody gives way');
  c.advance(1);
  t.ok(fits(share, 600), 'past it, room made');
  t.same(evicted.slice(3), ['stalled'], 'by the one behind its pace, though the queued one waited as long');
  t.ok(fits(share, 1500), 'and when that is not enough');
  t.same(evicted.slice(3), ['stalled', 'waiting'], 'by those that waited longest for their turn');
  // Its turn come, an answer is paced from then.
  const turned = hold('turned', 1500, true, {});
  c.advance(10 * WINDOW_MS);
  turned.turn();
  c.advance(WINDOW_MS);
  t.notOk(fits(share, 600), 'paced from its turn');
  c.advance(1);
  t.ok(fits(share, 600));
  t.same(evicted.at(-1), 'turned');
  // A body arriving on a connection whose answer fell behind is not evicted for its own room.
  const four = {};
  const answer = hold('answer', 1000, false, four);
  const upload = share.requestBytes(false, { evict: () => evicted.push('upload'), connection: four, rate: ANY_RATE });
  c.advance(WINDOW_MS + 1);
  upload.received(500);
  t.throws(() => upload.received(600), { code: 'TILE_ERR_FRONT_BUSY' }, 'its own connection is never let go of for it');
  t.same(evicted.at(-1), 'turned', 'neither was evicted');
  answer.release();
  upload.release();
});
