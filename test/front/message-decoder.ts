import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import t from 'tap';
import { MessageDecoder, WHOLE_AT } from '../../src/front/v2/message-decoder.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

type Decoder = { write(data: Buffer): Buffer[] };
/** grpc-js's own decoder, which MessageDecoder stands in for. */
const require = createRequire(import.meta.url);
const { StreamDecoder } = require('@grpc/grpc-js/build/src/stream-decoder.js') as {
  StreamDecoder: new (max: number) => Decoder;
};

/** A message as gRPC frames it (PROTOCOL-HTTP2.md): compressed flag, 4-byte big-endian length. */
function framed(flag: number, body: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out[0] = flag;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

/** `bytes` cut at `cuts`, each piece in an ArrayBuffer of its own, as socket reads are. */
function pieces(bytes: Buffer, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  return [0, ...at, bytes.length].slice(1).map((end, i, ends) => Buffer.from(bytes.subarray(i ? ends[i - 1] : 0, end)));
}

const decodeAll = (decoder: Decoder, chunks: Buffer[]) => chunks.flatMap((chunk) => decoder.write(chunk));

t.test("messages cut anywhere: each whole, in order, as grpc-js's decoder gives them", async (t) => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.constant(0), fc.uint8Array({ maxLength: 3000 })), { minLength: 1, maxLength: 6 }),
      fc.array(fc.nat(), { maxLength: 40 }),
      (messages, cuts) => {
        const sent = messages.map(([flag, body]) => framed(flag, body));
        const chunks = pieces(Buffer.concat(sent), cuts);
        const ours = decodeAll(new MessageDecoder(-1), chunks);
        const theirs = decodeAll(new StreamDecoder(-1), chunks);
        return (
          ours.length === sent.length &&
          ours.every((m, i) => m.equals(sent[i]) && m.equals(theirs[i])) &&
          theirs.length === sent.length
        );
      },
    ),
    { numRuns: 300 },
  );
  const big = framed(0, Buffer.alloc(150_528 * 32, 7));
  const out = decodeAll(
    new MessageDecoder(-1),
    pieces(
      big,
      Array.from({ length: 300 }, (_, i) => i * 16_384 + 9),
    ),
  );
  t.equal(out.length, 1);
  t.ok(out[0].equals(big), 'a 4.8 MB batch in 16 KiB frames');
  t.equal(out[0].byteOffset, 0, 'in a buffer of its own (free-bytes.ts can free it)');
  t.equal(out[0].buffer.byteLength, big.length);
});

t.test("a message over the limit throws as grpc-js's does", async (t) => {
  const message = framed(0, Buffer.alloc(101));
  const error = (decoder: Decoder) => {
    try {
      decoder.write(message);
    } catch (err) {
      return (err as Error).message;
    }
    return 'no error';
  };
  t.equal(error(new MessageDecoder(100)), 'Received message larger than max (101 vs 100)');
  t.equal(error(new MessageDecoder(100)), error(new StreamDecoder(100)));
  t.same(new MessageDecoder(101).write(message), [message], 'at the limit: read');
});

t.test('a message holds at most WHOLE_AT times what has arrived; a length prefix alone, nothing', async (t) => {
  // Each buffer the decoder takes, seen at Node's allocator call.
  const taken: number[] = [];
  const made: Buffer<ArrayBuffer>[] = [];
  const allocUnsafeSlow = Buffer.allocUnsafeSlow;
  Buffer.allocUnsafeSlow = (size: number) => {
    taken.push(size);
    made.push(allocUnsafeSlow(size));
    return made[made.length - 1];
  };
  t.teardown(() => {
    Buffer.allocUnsafeSlow = allocUnsafeSlow;
  });
  const decoder = new MessageDecoder(-1);
  const size = 64 * 1024 * 1024;
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(size, 1);
  const part = Buffer.alloc(size / 8);
  t.same(decoder.write(prefix), []);
  t.same(taken, [], 'no buffer for the declared 64 MB');
  for (let i = 1; i <= 7; i++) {
    decoder.write(part);
    t.ok(Math.max(...taken) <= WHOLE_AT * (5 + i * part.length), `${i}/8 arrived: buffers of ${taken.join(', ')}`);
  }
  const [message] = decoder.write(part);
  t.equal(message.length, 5 + size, 'then the whole message, in a buffer of its size');
  t.equal(message.buffer.byteLength, 5 + size);
  t.same(taken, [2 * (5 + part.length), 5 + size], 'twice the first eighth, then the whole at a quarter');
  t.equal(made[0].length, 0, 'the outgrown buffer freed at once (detached)');
});

t.test('a compressed message is refused at its prefix, and so is every later write', async (t) => {
  const decoder = new MessageDecoder(-1);
  const gzipped = framed(1, Buffer.alloc(16_000));
  t.throws(() => decoder.write(gzipped.subarray(0, 5)), /compressed message \(flag 1\).*grpc-encoding identity/);
  t.throws(() => decoder.write(framed(0, Buffer.alloc(10))), /compressed message/);
  t.equal(new StreamDecoder(-1).write(gzipped).length, 1, "grpc-js's passes it on, to inflate up to the limit");
});

t.test('a message over the limit ends the call: later writes throw too, as with grpc-js', async (t) => {
  for (const decoder of [new MessageDecoder(100), new StreamDecoder(100)]) {
    t.throws(() => decoder.write(framed(0, Buffer.alloc(400))), /larger than max \(400 vs 100\)/);
    t.throws(() => decoder.write(framed(0, Buffer.alloc(10))), /larger than max/);
  }
});

t.test("frames are let go once the message's buffer is allocated, not when it is whole", async (t) => {
  const message = framed(0, Buffer.alloc(1024 * 1024, 3));
  // The first half of the message, in 64 KiB reads; the second never comes. Fed from a function
  // of its own: an async function's suspended frame would keep the last read.
  const feed = (decoder: Decoder) =>
    Array.from({ length: 8 }, (_, i) => {
      const read = Buffer.from(message.subarray(i * 65_536, (i + 1) * 65_536));
      decoder.write(read);
      return new WeakRef(read.buffer);
    });
  const held = async (decoder: Decoder) => {
    const refs = feed(decoder);
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    await new Promise((resolve) => setImmediate(resolve));
    return refs.filter((r) => r.deref() !== undefined).length;
  };
  t.equal(await held(new MessageDecoder(-1)), 0, 'ours: none of the 8 reads held');
  t.equal(await held(new StreamDecoder(-1)), 8, "grpc-js's: all 8 held until the message is whole");
});

t.test('frames of one byte hold one byte each, not a view of their read', async (t) => {
  const message = framed(0, Buffer.alloc(200_000, 1));
  const heap = (decoder: Decoder) => {
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < message.length - 1; i++) decoder.write(message.subarray(i, i + 1));
    gc();
    return process.memoryUsage().heapUsed - before;
  };
  const ours = heap(new MessageDecoder(-1));
  const theirs = heap(new StreamDecoder(-1));
  t.ok(ours < 1024 * 1024, `ours: ${ours} bytes of heap for 200,000 frames`);
  t.ok(theirs > 8 * 1024 * 1024, `grpc-js's: ${theirs} bytes (a view each)`);
});
