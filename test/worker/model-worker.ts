// The worker's serving loop in-process: the real ModelWorker (decode, batcher, padding, warm-up,
// deadlines, cancellation, device faults) over the shipped tile-embed package, with the model
// session injected: a session that computes each row from its tile, on a run the test can hold.
// The same paths with real worker processes: test/e2e/api, overload and device-fault.
import { join } from 'node:path';
import type ort from 'onnxruntime-node';
import t from 'tap';
import { FrontHearing, reportLoad } from '../../src/worker/load-reports.js';
import type { ProviderName } from '../../src/config/config.js';
import type { ChannelReply, TileJob } from '../../src/ipc/protocol.js';
import { readPackage } from '../../src/model-package/model-package.js';
import type { WireTensor } from '../../src/worker/session-thread.js';
import {
  type FrontLink,
  ModelWorker,
  type ModelWorkerOptions,
  type WorkerSession,
} from '../../src/worker/model-worker.js';
import { MODELS } from '../helpers/server.js';

const pkg = readPackage(join(MODELS, 'tile-embed'));
const { width, height } = pkg.manifest.tile;
const DIM = pkg.manifest.embedding_dim!;
const EMBEDDING = pkg.manifest.tensors.embedding!;
const PIXELS = width * height * 3;

/** How a fake session turns a batch into outputs: the batch's pixels (n rows), and its run count. */
type Model = (rows: Uint8Array[], call: number) => Float32Array;

/** Row i's embedding: its first byte and its byte sum, so an answer shows which tile it came from. */
const perTile: Model = (rows) => {
  const out = new Float32Array(rows.length * DIM);
  rows.forEach((row, i) => {
    let sum = 0;
    for (const v of row) sum += v;
    out.fill(row[0], i * DIM, i * DIM + DIM / 2);
    out.fill(sum, i * DIM + DIM / 2, (i + 1) * DIM);
  });
  return out;
};

/** A session whose runs the test sees (`batches`), can hold (`hold`) and can fail (`fail`). */
function fakeSession(model: Model = perTile, provider: ProviderName = 'cpu', dim = DIM) {
  const batches: number[] = [];
  let gate: Promise<void> | null = null;
  let fail: string | null = null;
  const session: WorkerSession = {
    plan: { imageInput: 'uint8', bulkInput: 'float32', maxBatch: pkg.manifest.batch.max, warnings: [] },
    choice: { provider, skipped: [], adapter: null },
    run: async (feeds: Record<string, ort.Tensor>) => {
      const image = feeds[pkg.manifest.tensors.image];
      const n = image.dims[0];
      const data = image.data as Uint8Array;
      batches.push(n);
      if (gate) await gate;
      if (fail) throw new Error(fail);
      const rows = Array.from({ length: n }, (_, i) => data.subarray(i * PIXELS, (i + 1) * PIXELS));
      const values = model(rows, batches.length).subarray(0, n * dim);
      return { [EMBEDDING]: { type: 'float32', data: values, dims: [n, dim] } as WireTensor };
    },
  };
  return {
    session,
    batches,
    /** Holds every run until the returned function is called. */
    hold(): () => void {
      let release!: () => void;
      gate = new Promise((r) => (release = r));
      return () => {
        gate = null;
        release();
      };
    },
    failWith(message: string | null) {
      fail = message;
    },
  };
}

function makeWorker(session: WorkerSession, options: Partial<ModelWorkerOptions> = {}) {
  const worker = new ModelWorker(pkg, session, { maxBatch: 0, maxDelayMs: 5, batchShapes: 'auto', ...options });
  const replies: ChannelReply[] = [];
  let notify = () => {};
  const link: FrontLink = worker.link((m) => {
    replies.push(m);
    notify();
  });
  /** Resolves once `count` replies have come. */
  const replied = (count: number) =>
    new Promise<ChannelReply[]>((resolve) => {
      notify = () => replies.length >= count && resolve(replies);
      notify();
    });
  return { worker, link, replies, replied };
}

/** A raw RGB tile whose every byte is `value`. */
const rgbJob = (value: number, bytes = PIXELS): TileJob => ({
  task: 'embedding',
  withEmbedding: false,
  image: { format: 'rgb', bytes: new Uint8Array(bytes).fill(value), loc: ['body'] },
  width,
  height,
  bulk: null,
});
const FAR = () => Date.now() + 60_000;
const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));
/** Tiles `ids`, tile k's every byte k x 10, far from their deadlines. */
const sendTens = (link: FrontLink, ids: number[]) => {
  for (const id of ids) void link.accept(id, rgbJob(id * 10), FAR());
};
const valuesOf = (m: ChannelReply) => (m.type === 'result' && m.output.role === 'embedding' ? m.output.values : null);

t.test('tiles that arrive together run as one batch, each answered with its own row', async (t) => {
  const fake = fakeSession();
  const { link, replied } = makeWorker(fake.session);
  sendTens(link, [1, 2, 3]);
  const replies = await replied(3);
  t.same(fake.batches, [3], 'one run of three (before warm-up every size is served)');
  for (const m of replies) {
    t.equal(m.type, 'result');
    const values = valuesOf(m)!;
    t.equal(values.length, DIM, `tile ${m.id}: one row of ${DIM}`);
    t.equal(values[0], m.id * 10, `tile ${m.id}: its own row`);
    t.equal(values[DIM - 1], m.id * 10 * PIXELS);
  }
});

t.test("a batch is written into the session's spare buffer, whatever an earlier batch left in it", async (t) => {
  const fake = fakeSession();
  const given: number[] = [];
  // One buffer, handed out again and again, full of another batch's bytes each time.
  let spare: ArrayBuffer | null = null;
  fake.session.buffer = (bytes) => {
    given.push(bytes);
    if (spare?.byteLength !== bytes) spare = new ArrayBuffer(bytes);
    new Uint8Array(spare).fill(0xab);
    return spare;
  };
  const run = fake.session.run;
  const inGiven: boolean[] = [];
  fake.session.run = (feeds) => {
    inGiven.push((feeds[pkg.manifest.tensors.image].data as Uint8Array).buffer === spare);
    return run(feeds);
  };
  const { link, replied } = makeWorker(fake.session);
  sendTens(link, [1, 2, 3]);
  await replied(3);
  sendTens(link, [4, 5]);
  const replies = await replied(5);
  t.same(fake.batches, [3, 2], 'two runs');
  t.same(given, [3 * PIXELS, 2 * PIXELS], 'a buffer of each batch size asked of the session');
  t.same(inGiven, [true, true], "each batch's tensor in the buffer the session gave");
  for (const m of replies) {
    t.equal(valuesOf(m)![0], m.id * 10, `tile ${m.id}: its own row`);
    t.equal(valuesOf(m)![DIM - 1], m.id * 10 * PIXELS, `tile ${m.id}: every byte its own`);
  }
});

t.test(
  'warm-up on cpu with "auto" serves batches of one; a list keeps the shapes that agree and pads up to them',
  async (t) => {
    const fake = fakeSession();
    const auto = makeWorker(fake.session);
    const report = await auto.worker.warmup(1);
    t.same(report.shapes, [1]);
    t.same(
      report.checks.map((c) => c.batch),
      [1],
    );
    t.ok(report.batchIndependent);
    fake.batches.length = 0;
    for (const id of [1, 2, 3]) void auto.link.accept(id, rgbJob(id), FAR());
    await auto.replied(3);
    t.same(fake.batches, [1, 1, 1], 'three tiles, three runs of one');

    // Batches under 8 answer 0.5 off: the reference is the largest shape's first row, so only
    // batches of 8 are kept and every batch is padded to 8.
    const differsBelow8: Model = (rows) => {
      const out = perTile(rows, 0);
      if (rows.length < 8) for (let i = 0; i < out.length; i++) out[i] += 0.5;
      return out;
    };
    const listed = fakeSession(differsBelow8);
    const w = makeWorker(listed.session, { batchShapes: [1, 4, 8] });
    const checked = await w.worker.warmup(1);
    t.same(
      checked.checks.map((c) => [c.batch, c.identical]),
      [
        [1, false],
        [4, false],
        [8, true],
      ],
    );
    t.match(checked.checks[0].difference, /^row 0: last_hidden_mean: 80 of 160 values differ, by up to 0\.50$/);
    t.same(checked.shapes, [8], 'only the reference shape is kept');
    listed.batches.length = 0;
    for (const id of [1, 2, 3]) void w.link.accept(id, rgbJob(id), FAR());
    const replies = await w.replied(3);
    t.same(listed.batches, [8], 'a batch of three runs padded to eight');
    t.same(
      replies.map((m) => [m.id, valuesOf(m)![0]]),
      [
        [1, 1],
        [2, 2],
        [3, 3],
      ],
      'and only the three tiles are answered, each with its row',
    );
  },
);

t.test('warm-up finds a graph that mixes the batch, and a provider that is not deterministic', async (t) => {
  // Every row gets the batch's mean first byte: a tile's outputs depend on its neighbours.
  const mixing: Model = (rows) => {
    const mean = rows.reduce((s, r) => s + r[0], 0) / rows.length;
    return new Float32Array(rows.length * DIM).fill(mean);
  };
  const mixed = await makeWorker(fakeSession(mixing).session, { batchShapes: [1, 4] }).worker.warmup(1);
  t.same(mixed.shapes, [1]);
  t.match(mixed.note, /the graph mixes the batch/);

  // Each run answers a little differently (a GPU's atomics).
  const noisy: Model = (rows, call) => new Float32Array(rows.length * DIM).fill(call);
  const gpu = await makeWorker(fakeSession(noisy, 'webgpu').session).worker.warmup(1);
  t.equal(gpu.deterministic, false);
  t.notOk(gpu.batchIndependent);
  t.match(gpu.note, /webgpu gave the batch of 16 two different answers/);
});

t.test('warm-up refuses an output that does not fit its role', async (t) => {
  const { worker } = makeWorker(fakeSession(perTile, 'cpu', DIM / 2).session);
  await t.rejects(worker.warmup(1), {
    code: 'TILE_ERR_PACKAGE_OUTPUT_SHAPE',
    message: /tensors\.embedding: "last_hidden_mean" has shape \[1, 80\]/,
  });
});

t.test('a tile past its deadline is dropped undecoded, never run; a late one in the queue too', async (t) => {
  let now = 1_000_000;
  const fake = fakeSession();
  const { worker, link, replied } = makeWorker(fake.session, { clock: () => now });
  void link.accept(1, rgbJob(1), now - 1);
  const [gone] = await replied(1);
  t.same(gone, {
    type: 'dropped',
    id: 1,
    reason: 'expired',
    load: { queued: 0, held: 0, batchMs: null, maxBatch: 16 },
  });
  t.same(fake.batches, [], 'never run');
  // Undecoded, too: an image that would fail to decode is dropped, not reported undecodable.
  const png = (bytes: number[]): TileJob => ({
    ...rgbJob(0),
    image: { format: 'png', bytes: new Uint8Array(bytes), loc: ['body'] },
  });
  void link.accept(9, png([1, 2, 3]), now - 1);
  t.match((await replied(2))[1], { type: 'dropped', id: 9, reason: 'expired' }, 'not decoded');

  // Queued behind a held run, it expires while it waits.
  const release = fake.hold();
  void link.accept(2, rgbJob(2), now + 60_000);
  await tick(20);
  void link.accept(3, rgbJob(3), now + 100);
  await tick(20);
  now += 200;
  release();
  const replies = await replied(4);
  t.match(replies[2], { type: 'result', id: 2 });
  t.match(replies[3], { type: 'dropped', id: 3, reason: 'expired' });
  t.same(fake.batches, [1], 'the late tile did not run');
  t.equal(worker.stats.expired, 3);
  t.equal(worker.stats.startedLate, 0);
});

t.test('a prepared batch that does not run gives its input buffer back, never a tile of its own pixels', async (t) => {
  for (const maxBatch of [2, 1]) {
    const fake = fakeSession();
    const given: ArrayBuffer[] = [];
    const recycled: ArrayBuffer[] = [];
    fake.session.buffer = (bytes) => given.at(-1 + given.push(new ArrayBuffer(bytes)))!;
    fake.session.recycle = (buffer) => void recycled.push(buffer);
    const { worker, link, replied } = makeWorker(fake.session, { maxBatch });
    const release = fake.hold();
    void link.accept(1, rgbJob(1), FAR());
    await tick(20);
    // Tile 1 runs (held); a full batch behind it is prepared, then one of its tiles is cancelled.
    const behind = Array.from({ length: maxBatch }, (_, i) => i + 2);
    for (const id of behind) void link.accept(id, rgbJob(id), FAR());
    await tick(20);
    t.equal(given.length, maxBatch === 1 ? 0 : 1, `batch of ${maxBatch}: prepared ahead (one tile: as decoded)`);
    link.cancel([2]);
    await replied(1);
    t.ok(
      recycled.length === given.length && recycled.every((b, i) => b === given[i]),
      `batch of ${maxBatch}: its buffer back to the session, and no other`,
    );
    release();
    await worker.idle();
    t.equal(worker.stats.tiles, maxBatch, 'the other tiles ran');
  }
});

t.test(
  'a cancelled tile is dropped whether queued or waiting; a front that hangs up cancels all it sent',
  async (t) => {
    const fake = fakeSession();
    const { worker, link, replied } = makeWorker(fake.session, { maxBatch: 1 });
    const release = fake.hold();
    void link.accept(1, rgbJob(1), FAR());
    await tick(20);
    // Tile 1 runs (held); 2 and 3 are decoded into the queue (room for two batches of one); 4 waits.
    for (const id of [2, 3, 4]) void link.accept(id, rgbJob(id), FAR());
    await tick(20);
    link.cancel([2, 4]);
    const dropped = await replied(2);
    t.same(
      dropped.map((m) => [m.type, m.id]),
      [
        ['dropped', 2],
        ['dropped', 4],
      ],
    );
    release();
    const replies = await replied(3);
    t.match(replies[2], { type: 'result', id: 1 });
    await worker.idle();
    t.match(replies.at(-1), { type: 'result', id: 3 });
    t.same(fake.batches, [1, 1], 'tiles 1 and 3 ran, 2 and 4 did not');
    t.equal(worker.stats.cancelled, 2);

    // Another front's tiles, then it hangs up: nothing of it runs or is answered.
    const hold = fake.hold();
    const other = makeWorker(fake.session, { maxBatch: 1 });
    void other.link.accept(1, rgbJob(1), FAR());
    await tick(20);
    void other.link.accept(2, rgbJob(2), FAR());
    await tick(20);
    other.worker.unlink(other.link);
    t.equal(other.worker.stats.cancelled, 1, 'the queued tile is dropped');
    t.equal(other.worker.load().held, 1, 'the running one still counts against maxHeld');
    hold();
    await other.worker.idle();
    t.same(other.replies, [], 'nothing is answered to a front that left');
    t.equal(other.worker.stats.tiles, 1, 'the running tile finished');
    t.equal(other.worker.load().held, 0, 'and is no longer held');
  },
);

t.test('an undecodable image is answered as a typed decode failure, not run', async (t) => {
  const fake = fakeSession();
  const { link, replied } = makeWorker(fake.session);
  void link.accept(1, rgbJob(1, PIXELS - 3), FAR());
  void link.accept(
    2,
    { ...rgbJob(2), image: { format: 'png', bytes: new Uint8Array([1, 2, 3]), loc: ['body'] } },
    FAR(),
  );
  const replies = await replied(2);
  t.match(replies[0], {
    type: 'undecodable',
    id: 1,
    failure: { kind: 'rgb-length', expected: PIXELS, got: PIXELS - 3 },
  });
  t.match(replies[1], { type: 'undecodable', id: 2, failure: { kind: 'png-undecodable' } });
  t.same(fake.batches, []);
});

t.test('a device fault: the batch and every later one are refused as retryable, the worker says so once', async (t) => {
  const fake = fakeSession();
  const faults: string[] = [];
  const { worker, link, replied } = makeWorker(fake.session, { onDeviceFault: (r) => faults.push(r) });
  fake.failWith('CUDA failure 700: an illegal memory access was encountered\n at kernel');
  void link.accept(1, rgbJob(1), FAR());
  const [first] = await replied(1);
  t.match(first, { type: 'error', id: 1, error: { code: 'TILE_ERR_WORKER_GONE', retryable: true } });
  t.match((first as { error: { message: string } }).error.message, /the device failed \(CUDA failure 700/);
  t.same(faults, ['CUDA failure 700: an illegal memory access was encountered']);
  fake.failWith(null);
  void link.accept(2, rgbJob(2), FAR());
  const replies = await replied(2);
  t.match(replies[1], { type: 'error', id: 2, error: { retryable: true } }, 'not run on a failed device');
  t.same(fake.batches, [1], 'the second tile never reached the session');
  t.equal(worker.stats.failures, 1);
});

t.test('any other run failure answers its batch with the error, not retryable, and the worker serves on', async (t) => {
  const fake = fakeSession();
  const faults: string[] = [];
  const { worker, link, replied } = makeWorker(fake.session, { onDeviceFault: (r) => faults.push(r) });
  fake.failWith('Non-zero status code returned while running Gemm node');
  void link.accept(1, rgbJob(1), FAR());
  const [first] = await replied(1);
  t.equal(first.type, 'error');
  t.notOk((first as { error: { retryable?: boolean } }).error.retryable, 'the tile ran: retrying it would fail again');
  t.same(faults, []);
  fake.failWith(null);
  void link.accept(2, rgbJob(2), FAR());
  t.match((await replied(2))[1], { type: 'result', id: 2 });
  t.equal(worker.stats.lastError, 'Non-zero status code returned while running Gemm node');
});

t.test('an instance holds at most maxHeld tiles from every front: more are refused at once, 503', async (t) => {
  const fake = fakeSession();
  const { worker, link, replied } = makeWorker(fake.session, { maxHeld: 2 });
  const other = worker.link(() => {});
  const release = fake.hold();
  void link.accept(1, rgbJob(1), Date.now() + 60_000);
  void other.accept(1, rgbJob(1), Date.now() + 60_000);
  void link.accept(2, rgbJob(2), Date.now() + 60_000);
  const [refused] = await replied(1);
  t.match(refused, {
    type: 'error',
    id: 2,
    error: { code: 'TILE_ERR_QUEUE_FULL', message: /its instance holds 2 of its 2 tiles, its part of max_queue/ },
    load: { held: 2, maxHeld: 2 },
  });
  t.notOk('retryable' in (refused as { error: object }).error, 'not for another instance: the model is full');
  t.equal(worker.stats.refused, 1);
  release();
  const replies = await replied(2);
  t.match(replies[1], { type: 'result', id: 1, load: { held: 1 } }, 'its load counts the tiles still held, not itself');
});

t.test("a request's tiles are taken all or none; an idle instance takes any request", async (t) => {
  const fake = fakeSession();
  const { worker, link, replied } = makeWorker(fake.session, { maxHeld: 2 });
  const release = fake.hold();
  const far = Date.now() + 60_000;
  link.acceptAll(
    [1, 2, 3].map((id) => ({ id, job: rgbJob(id) })),
    far,
  );
  t.equal(worker.load().held, 3, 'three tiles on an idle instance whose part is two: all taken');
  link.acceptAll(
    [4, 5].map((id) => ({ id, job: rgbJob(id) })),
    far,
  );
  const refused = await replied(2);
  t.same(
    refused.map((m) => [m.type, m.id]),
    [
      ['error', 4],
      ['error', 5],
    ],
    'a busy one refuses the whole request, none of it run',
  );
  t.equal(worker.stats.refused, 2);
  release();
  t.same(
    (await replied(5)).slice(2).map((m) => [m.type, m.id]),
    [
      ['result', 1],
      ['result', 2],
      ['result', 3],
    ],
  );
});

t.test(
  'the load beat: each front hears the load while busy, when it differs from what it heard, and at the keepalive; an idle beat sleeps until the keepalive or new tiles',
  async (t) => {
    // The one timer set, and the delay it was set for; null once it fired or was cancelled.
    let pending: { fn: () => void; ms: number } | null = null;
    const heard: [string, number][] = [];
    let held = 0;
    const now = () => ({ queued: 0, held, batchMs: 10, maxBatch: 4 });
    const fronts = Object.fromEntries(
      ['a', 'b'].map((name) => [name, new FrontHearing((load) => heard.push([name, load.held]), now())]),
    );
    t.same(
      heard,
      [
        ['a', 0],
        ['b', 0],
      ],
      'a front that connects hears the load at once',
    );
    const beat = reportLoad(now, () => Object.values(fronts), {
      ms: 100,
      keepaliveMs: 300,
      timer: (fn, ms) => {
        t.equal(pending, null, 'one timer at a time');
        const timer = { fn, ms };
        pending = timer;
        return () => {
          if (pending === timer) pending = null;
        };
      },
    });
    /** Fires the pending timer `n` times; what the fronts heard, and the delay each was set for. */
    const beats = (n: number) => {
      heard.length = 0;
      const delays: number[] = [];
      for (let i = 0; i < n; i++) {
        const { fn, ms } = pending!;
        delays.push(ms);
        pending = null;
        fn();
      }
      return { heard: [...heard], delays };
    };
    t.same(beats(1), { heard: [], delays: [100] }, 'the first beat after 100 ms: idle and unchanged, silent');
    t.equal(pending!.ms, 300, 'idle: the next beat at the keepalive');
    t.same(
      beats(1),
      {
        heard: [
          ['a', 0],
          ['b', 0],
        ],
        delays: [300],
      },
      'which is sent',
    );
    t.same(beats(1).heard.length, 2, 'and again each keepalive');
    held = 3;
    beat.wake();
    t.equal(pending!.ms, 100, 'tiles came: the sleeping beat is woken, 100 ms away');
    t.same(
      beats(2),
      {
        heard: [
          ['a', 3],
          ['b', 3],
          ['a', 3],
          ['b', 3],
        ],
        delays: [100, 100],
      },
      'busy: every beat, changed or not',
    );
    const before = pending;
    beat.wake();
    t.equal(pending, before, 'more tiles while awake: the beat keeps its time (a stream of tiles cannot hold it off)');
    held = 0;
    // The last tile answered was b's: b heard the idle load with it, a still the busy one.
    fronts.b.heard(now());
    t.same(beats(1), { heard: [['a', 0]], delays: [100] }, 'idle again: at once, to the front that heard another load');
    t.equal(pending!.ms, 300, 'and the beat sleeps');
    // Woken by tiles that were answered before its beat: the sleep it cut short is not timed, so
    // it counts as the keepalive and every front is told, never later than the keepalive.
    beat.wake();
    t.same(
      beats(1),
      {
        heard: [
          ['a', 0],
          ['b', 0],
        ],
        delays: [100],
      },
      'a beat woken from sleep tells every front',
    );
    beat.stop();
    t.equal(pending, null, 'stopped: no timer left');
  },
);
