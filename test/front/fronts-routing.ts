// Two fronts and two instances, in-process: fake workers on real Unix sockets that hold every tile
// they take (a long batch), at most one each, refuse the next, and send their load on a beat. A
// front must weigh the other front's tiles by the load reports, or it sends a tile to a full
// instance while the other is idle (found in review: each front used to count only its own).
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { ModelClient } from '../../src/front/model-client.js';
import { Channel } from '../../src/ipc/channel.js';
import type { ChannelRequest, TileJob, WorkerMessage } from '../../src/ipc/protocol.js';
import { errors } from '../../src/lib/errors.js';
import { readyInstance } from '../helpers/ready-instance.js';
import { tempDir } from '../../tools/temp-dir.js';

function holdingWorker(path: string) {
  let held = 0;
  const channels = new Set<Channel<ChannelRequest, WorkerMessage>>();
  const load = () => ({ queued: held, held, batchMs: 5, maxBatch: 1 });
  const server = createServer((socket) => {
    const channel = new Channel<ChannelRequest, WorkerMessage>(socket);
    channels.add(channel);
    channel.on('message', (m) => {
      if (m.type !== 'infer') return;
      for (const { id } of m.tiles)
        if (held >= 1) {
          const error = errors.queueFull('gene-expr', 'full', 1).toWire();
          channel.send({ type: 'error', id, error, load: load() });
        } else held++;
    });
  });
  const beat = setInterval(() => {
    for (const c of channels) if (c.isOpen) c.send({ type: 'load', load: load() });
  }, 20);
  return {
    path,
    held: () => held,
    listening: new Promise<void>((resolve) => server.listen(path, resolve)),
    close() {
      clearInterval(beat);
      for (const c of channels) c.socket.destroy();
      server.close();
    },
  };
}

const job: TileJob = {
  task: 'prediction',
  withEmbedding: false,
  image: { format: 'png', bytes: new Uint8Array(8), loc: ['body'] },
  width: 224,
  height: 224,
  bulk: null,
};
const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

t.test("a front routes by every front's tiles at each instance, as the load reports give them", async (t) => {
  const root = t.testdir({
    'config.json': JSON.stringify({ models: [{ name: 'gene-expr', instances: 2, max_queue: 2 }] }),
  });
  mkdirSync(join(root, 'models', 'gene-expr'), { recursive: true });
  writeFileSync(join(root, 'models', 'gene-expr', 'manifest.json'), '{}');
  const config = loadConfig({ CONFIG: join(root, 'config.json') }, root);
  const dir = tempDir('fronts-routing');
  const workers = [0, 1].map((i) => holdingWorker(join(dir, `w${i}.sock`)));
  await Promise.all(workers.map((w) => w.listening));
  t.teardown(() => {
    for (const w of workers) w.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const instances = workers.map((w, i) => readyInstance('gene-expr', i, 2000 + i, w.path));
  const [a, b] = [0, 1].map(() => new ModelClient(config, 2, () => {}));
  for (const front of [a!, b!])
    front.onMessage({
      type: 'models',
      models: [{ name: 'gene-expr', state: 'ready', reason: null, info: null, instances }],
    });
  await tick(100);
  const first = a!.infer('gene-expr', job, { deadline: Date.now() + 800, ticket: a!.admit('gene-expr', 1) });
  first.catch(() => {});
  await tick(100);
  const second = await b!
    .infer('gene-expr', job, { deadline: Date.now() + 800, ticket: b!.admit('gene-expr', 1) })
    .then(
      () => 'answered',
      (e: { code?: string }) => e.code ?? 'failed',
    );
  t.not(second, 'TILE_ERR_QUEUE_FULL', 'the tile went to the idle instance');
  t.same(
    workers.map((w) => w.held()),
    [1, 1],
    'one tile at each',
  );
});
