// The request/reply helper and the socket channel every front-worker link uses.
import t from 'tap';
import { createServer, connect, type AddressInfo } from 'node:net';
import { Channel } from '../../src/ipc/channel.js';
import { RequestReply } from '../../src/ipc/request-reply.js';

t.test('request/reply: replies match ids, timers answer for a silent peer, a dead peer rejects all', async (t) => {
  const rr = new RequestReply<string>();
  const sent: number[] = [];
  const a = rr.request((id) => sent.push(id));
  const b = rr.request((id) => sent.push(id), { ms: 20, error: () => new Error('too slow') });
  const c = rr.request((id) => sent.push(id));
  t.equal(rr.size, 3);
  t.ok(rr.settle(sent[0], 'first'));
  t.equal(await a, 'first');
  await t.rejects(b, /too slow/);
  t.notOk(rr.settle(sent[1], 'late'), 'a late reply finds nobody waiting');
  rr.rejectAll(() => new Error('peer gone'));
  await t.rejects(c, /peer gone/);
  await t.rejects(
    rr.request(() => {
      throw new Error('cannot send');
    }),
    /cannot send/,
  );
  t.equal(rr.size, 0);
});

t.test('channel: framed messages with typed arrays survive any split of the stream', async (t) => {
  const received: unknown[] = [];
  const server = createServer((socket) => {
    // Echo byte by byte at first, to split frames anywhere.
    socket.on('data', (d) => {
      for (const byte of d) socket.write(Buffer.from([byte]));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const channel = new Channel<{ n: number; data: Float32Array }, { n: number; data: Float32Array }>(
    connect((server.address() as AddressInfo).port, '127.0.0.1'),
  );
  channel.on('message', (m) => received.push(m));
  const data = Float32Array.from({ length: 1000 }, (_, i) => i / 3);
  for (let n = 0; n < 3; n++) channel.send({ n, data });
  await new Promise<void>((r) => {
    const check = () => (received.length === 3 ? r() : setTimeout(check, 5));
    check();
  });
  t.same(
    received.map((m: any) => m.n),
    [0, 1, 2],
  );
  t.same((received[2] as any).data, data);
  // Every kind of typed array, at sizes that leave the next one unaligned, empty, nested, twice.
  const png = Buffer.from('an odd number of bytes');
  const mixed = {
    png,
    again: png,
    u8: new Uint8Array([1, 2, 3]),
    f64: Float64Array.of(Math.PI, -0),
    nested: [{ i64: BigInt64Array.of(-5n) }],
    empty: new Float32Array(0),
    view: new Int16Array(new ArrayBuffer(12), 2, 3).fill(-7),
  };
  channel.send({ n: 3, data: mixed as unknown as Float32Array });
  await new Promise<void>((r) => {
    const check = () => (received.length === 4 ? r() : setTimeout(check, 5));
    check();
  });
  // An empty typed array last: the frame ends with it.
  channel.send({ n: 4, data: new Float32Array(0) });
  await new Promise<void>((r) => {
    const check = () => (received.length === 5 ? r() : setTimeout(check, 5));
    check();
  });
  t.same((received[4] as any).data, new Float32Array(0), 'an empty attachment that ends the frame');
  const got = (received[3] as any).data;
  t.ok(Buffer.isBuffer(got.png) && got.png.equals(png), 'a Buffer comes back a Buffer');
  t.same(got.again, png);
  t.same(
    [got.u8, got.f64, got.nested[0].i64, got.empty, got.view],
    [mixed.u8, mixed.f64, mixed.nested[0].i64, mixed.empty, mixed.view],
  );
  t.equal(got.f64.constructor, Float64Array);
  t.equal(got.view.constructor, Int16Array);
  channel.close();
  await new Promise<void>((r) => channel.once('close', () => r()));
  t.notOk(channel.isOpen);
  t.throws(() => channel.send({ n: 9, data }), /channel closed/);
});
