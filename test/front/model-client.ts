// The front's model client in-process: the real ModelClient against fake workers on Unix sockets
// of this process, speaking the channel protocol (src/ipc/channel.ts), for routing, retries on
// another instance, the worker's typed decode failures, cancellation and a lost worker. The same
// paths with real worker processes: test/e2e/supervision.test.ts and device-fault.test.ts.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer, type Server, Socket } from 'node:net';
import { basename, join } from 'node:path';
import t, { type Test } from 'tap';
import { loadConfig } from '../../src/config/config.js';
import type { Connect } from '../../src/front/instances.js';
import { ModelClient } from '../../src/front/model-client.js';
import { Channel } from '../../src/ipc/channel.js';
import type { ChannelReply, ChannelRequest, TileJob } from '../../src/ipc/protocol.js';
import { errors, type ServiceError } from '../../src/lib/errors.js';
import { readyInstance } from '../helpers/ready-instance.js';
import { tempDir } from '../../tools/temp-dir.js';

const load = { queued: 0, held: 0, batchMs: 5, maxBatch: 1 };

/** A worker that answers each tile as `answer` says (null: never), and records what it got. */
class FakeWorker {
  readonly requests: ChannelRequest[] = [];
  readonly sockets = new Set<Socket>();
  readonly server: Server;
  constructor(
    readonly pid: number,
    readonly path: string,
    public answer: (id: number) => ChannelReply | null,
  ) {
    this.server = createServer((socket) => {
      this.sockets.add(socket);
      const channel = new Channel<ChannelRequest, ChannelReply>(socket);
      channel.on('message', (m) => {
        this.requests.push(m);
        if (m.type !== 'infer') return;
        for (const { id } of m.tiles) {
          const reply = this.answer(id);
          if (reply) channel.send(reply);
        }
      });
    });
  }
  listen = () => new Promise<void>((resolve) => this.server.listen(this.path, resolve));
  /** Dies: its connections reset. */
  die(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
  tiles = () => this.requests.flatMap((m) => (m.type === 'infer' ? m.tiles : []));
}

const result = (id: number, value: number): ChannelReply => ({
  type: 'result',
  id,
  output: { role: 'prediction', values: new Float32Array([value]) },
  embedding: null,
  tissueFraction: null,
  batchSize: 1,
  times: { decode: 0, preprocess: 0, queue: 0, inference: 0, worker: 0 },
  sha256: 'a'.repeat(64),
  load,
});

const job: TileJob = {
  task: 'prediction',
  withEmbedding: false,
  image: { format: 'png', bytes: new Uint8Array(8), loc: ['body', 'image_data'] },
  width: 224,
  height: 224,
  bulk: null,
};

async function setUp(t: Test, answers: ((id: number) => ChannelReply | null)[], connect?: Connect) {
  const root = t.testdir({ 'config.json': JSON.stringify({ models: [{ name: 'gene-expr', instances: 2 }] }) });
  mkdirSync(join(root, 'models', 'gene-expr'), { recursive: true });
  writeFileSync(join(root, 'models', 'gene-expr', 'manifest.json'), '{}');
  const config = loadConfig({ CONFIG: join(root, 'config.json') }, root);
  // Socket paths are short (a Unix socket's path has at most 107 bytes): not in the test folder.
  const sockets = tempDir('model-client');
  const workers = answers.map((answer, i) => new FakeWorker(1000 + i, join(sockets, `w${i}.sock`), answer));
  await Promise.all(workers.map((w) => w.listen()));
  t.teardown(() => {
    for (const w of workers) w.die();
    rmSync(sockets, { recursive: true, force: true });
  });
  const client = new ModelClient(config, 1, () => {}, { connect });
  const instance = (w: FakeWorker, i: number) => readyInstance('gene-expr', i, w.pid, w.path);
  client.onMessage({
    type: 'models',
    models: [{ name: 'gene-expr', state: 'ready', reason: null, info: null, instances: workers.map(instance) }],
  });
  // Connected once a probe round trip has gone through each.
  await new Promise((resolve) => setTimeout(resolve, 50));
  return { client, workers };
}

const valueIn = (r: Awaited<ReturnType<ModelClient['infer']>>) => (r.output.role === 'mask' ? NaN : r.output.values[0]);

t.test('tiles go to the instance holding fewest; an answer passes through', async (t) => {
  const held: number[] = [];
  const { client, workers } = await setUp(t, [(id) => (held.push(id), null), (id) => result(id, 7)]);
  const slow = client.infer('gene-expr', job, { deadline: Date.now() + 200 });
  const fast = await client.infer('gene-expr', job);
  t.equal(valueIn(fast), 7, 'the second tile went to the other, idle instance');
  t.equal(workers[0]!.tiles().length, 1);
  t.equal(workers[1]!.tiles().length, 1);
  await t.rejects(slow, { code: 'TILE_ERR_DEADLINE' }, 'the unanswered one expires at its deadline');
});

t.test('an instance whose connection fails: its tiles go to the other, none lost', async (t) => {
  const opened: string[] = [];
  const { client, workers } = await setUp(t, [(id) => result(id, 1), (id) => result(id, 9)], (path) => {
    opened.push(basename(path));
    if (!path.endsWith('w0.sock')) return createConnection(path);
    // The first worker's connection never completes, then fails: what was sent on it never left.
    const socket = new Socket();
    setTimeout(() => socket.destroy(new Error('connect ECONNREFUSED')), 150);
    return socket;
  });
  t.same(opened, ['w0.sock', 'w1.sock'], 'one connection per ready instance');
  // Two at once: one is routed to each instance.
  const answers = await Promise.all([client.infer('gene-expr', job), client.infer('gene-expr', job)]);
  t.same(answers.map(valueIn), [9, 9], 'both answered by the reachable instance');
  t.equal(workers[0]!.tiles().length, 0);
  t.equal(workers[1]!.tiles().length, 2);
});

t.test('retried on another instance only when the worker says it did not run the tile', async (t) => {
  const gone = errors.workerGone('the device failed');
  const { client, workers } = await setUp(t, [
    (id) => ({ type: 'error', id, error: gone.toWire(true), load }),
    (id) => result(id, 3),
  ]);
  t.equal(valueIn(await client.infer('gene-expr', job)), 3, 'retryable: answered by the other instance');
  t.equal(workers[1]!.tiles().length, 1);

  workers[0]!.answer = (id) => ({ type: 'error', id, error: gone.toWire(), load });
  workers[1]!.answer = () => null;
  await t.rejects(
    client.infer('gene-expr', job, { deadline: Date.now() + 300 }),
    { code: 'TILE_ERR_WORKER_GONE' },
    'the same code, not said retryable: answered as it is',
  );
  t.equal(workers[1]!.tiles().length, 1, 'and not sent to the other');
});

t.test("a worker's decode failure is worded by the front at the image's place", async (t) => {
  const { client } = await setUp(t, [
    (id) => ({ type: 'undecodable', id, failure: { kind: 'png-undecodable', reason: 'bad magic' }, load }),
    () => null,
  ]);
  const err = (await client.infer('gene-expr', job).catch((e: unknown) => e)) as ServiceError;
  t.equal(err.code, 'TILE_ERR_VALIDATION');
  t.same(err.detail, [
    {
      loc: ['body', 'image_data'],
      msg: 'Value error, image_data is not a decodable PNG: bad magic',
      type: 'value_error',
    },
  ]);
});

t.test('a client that leaves cancels its tile in the worker', async (t) => {
  const { client, workers } = await setUp(t, [() => null, () => null]);
  const left = new AbortController();
  const answer = client.infer('gene-expr', job, { signal: left.signal }).catch((e: unknown) => e);
  await new Promise((resolve) => setTimeout(resolve, 20));
  left.abort();
  await new Promise((resolve) => setTimeout(resolve, 50));
  const sent = workers.flatMap((w) => w.tiles());
  const cancels = workers.flatMap((w) => w.requests.flatMap((m) => (m.type === 'cancel' ? m.ids : [])));
  t.same(cancels, [sent[0]!.id], 'one cancel message naming it');
  void answer;
});

t.test('a worker lost with a tile in flight: retried when killed from outside, else 503', async (t) => {
  for (const external of [true, false]) {
    const { client, workers } = await setUp(t, [() => null, (id) => result(id, 5)]);
    const answer = client.infer('gene-expr', job).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 20));
    t.equal(workers[0]!.tiles().length, 1, 'the tile is in the first worker');
    client.onMessage({ type: 'worker-exit', pid: workers[0]!.pid, external });
    workers[0]!.die();
    const got = await answer;
    if (external) t.equal(valueIn(got as never), 5, 'killed from outside: it ran on the other instance');
    else t.match(got, { code: 'TILE_ERR_WORKER_GONE' }, 'died of its own: answered, not given to another');
  }
});

t.test("a request's bytes are freed once every tile is answered with a result, and only then", async (t) => {
  let answers = 0;
  const { client, workers } = await setUp(t, [(id) => result(id, 4), (id) => result(id, 4)]);
  const TILE = 150_528;
  const tile = (bytes: Buffer): TileJob => ({ ...job, image: { format: 'rgb', bytes, loc: ['body'] } });

  const body = Buffer.alloc(2 * TILE, 7);
  const jobs = [tile(body.subarray(0, TILE)), tile(body.subarray(TILE))];
  const results = await client.inferBatch('gene-expr', jobs, { spent: body });
  t.same(
    results.map((r) => valueIn(r as never)),
    [4, 4],
  );
  t.equal(body.byteLength, 0, 'every tile answered with a result: the body is freed');
  const got = workers.flatMap((w) => w.tiles()).map((s) => s.job.image.bytes);
  t.ok(
    got.length === 2 && got.every((b) => b.length === TILE && b.every((v) => v === 7)),
    'after each worker had every byte of its tile',
  );

  const slice = Buffer.alloc(2 * TILE, 7).subarray(0, TILE);
  await client.infer('gene-expr', tile(slice), { spent: slice });
  t.equal(slice.byteLength, TILE, 'a slice of a larger buffer is kept: the rest of it is not the request’s');

  // One tile of two answered with an error: its write is done, but not every tile's need be.
  for (const w of workers)
    w.answer = (id) =>
      answers++ % 2 ? { type: 'error', id, error: errors.workerGone('gone').toWire(), load } : result(id, 4);
  const mixed = Buffer.alloc(2 * TILE, 7);
  await client.inferBatch('gene-expr', [tile(mixed.subarray(0, TILE)), tile(mixed.subarray(TILE))], {
    spent: mixed,
  });
  t.equal(mixed.byteLength, 2 * TILE, 'a tile answered with an error: kept');

  for (const w of workers) w.answer = () => null;
  const late = Buffer.alloc(TILE, 7);
  await t.rejects(client.infer('gene-expr', tile(late), { spent: late, deadline: Date.now() + 100 }), {
    code: 'TILE_ERR_DEADLINE',
  });
  t.equal(late.byteLength, TILE, 'unanswered at its deadline (its write may still be under way): kept');
});
