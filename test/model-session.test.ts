// What crosses to the session thread: a tensor's own buffer is handed over as it is; a view into
// a larger buffer (an Open Inference Protocol batch's IPC frame) is copied out alone, since
// postMessage would clone the whole buffer under it for every tile.
import t from 'tap';
import { MessageChannel } from 'node:worker_threads';
import ort from '../src/worker/ort.js';
import { toWire } from '../src/worker/model-session.js';

t.test('feeds cross alone: a view is copied out, an own buffer handed over', async (t) => {
  const frame = new Uint8Array(32 * 12).map((_, i) => i % 251);
  const tile = frame.subarray(12, 24);
  const own = new Float32Array([1.5, -2, 3.25]);
  const { wire, transfer } = toWire({
    image: new ort.Tensor('uint8', tile, [1, 2, 2, 3]),
    bulk: new ort.Tensor('float32', own, [1, 3]),
  });
  const image = wire.image.data as Uint8Array;
  t.equal(image.buffer.byteLength, 12, "the tile's bytes alone, not the frame's 384");
  t.same([...image], [...tile], 'the same bytes');
  t.ok(wire.bulk.data === own, 'an own buffer is not copied');
  t.ok(wire.bulk.data instanceof Float32Array && image instanceof Uint8Array, 'each keeps its element type');

  const { port1, port2 } = new MessageChannel();
  const arrived = new Promise<{ image: Uint8Array }>((resolve) => port2.once('message', resolve));
  port1.postMessage({ image }, transfer);
  t.equal((await arrived).image.buffer.byteLength, 12, 'and so it arrives');
  t.equal(frame.byteLength, 384, 'the frame stays whole for the other tiles');
  t.equal(own.byteLength, 0, 'the own buffer was handed over');
  port1.close();
});
