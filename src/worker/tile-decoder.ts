// Turns a TileJob's image into the model's input pixels, or into a DecodeFailure saying what was
// expected (the front words it for the client). Runs in the worker: a PNG is decoded on the libuv
// pool (decode_threads threads), so one worker decodes on several cores while its JS thread
// answers IPC; raw RGB pixels are used as they came.
import type { DecodeFailure, TileJob } from '../ipc/protocol.js';
import { decodePng, type Pixels } from '../tile/png.js';

export type Decoded = { pixels: Pixels; decodeMs: number } | { failure: DecodeFailure };

export async function decodeTile(job: TileJob): Promise<Decoded> {
  const started = performance.now();
  const { format, bytes } = job.image;
  if (format === 'rgb') {
    // The front checked the length; a job is still never trusted to size anything.
    const expected = job.width * job.height * 3;
    if (bytes.length !== expected) return { failure: { kind: 'rgb-length', expected, got: bytes.length } };
    return {
      pixels: { width: job.width, height: job.height, channels: 3, data: bytes },
      decodeMs: performance.now() - started,
    };
  }
  let pixels: Pixels;
  try {
    pixels = await decodePng(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  } catch (err) {
    return { failure: { kind: 'png-undecodable', reason: (err as Error).message } };
  }
  if (pixels.width !== job.width || pixels.height !== job.height) {
    const { width, height } = pixels;
    return { failure: { kind: 'png-size', width, height, expectedWidth: job.width, expectedHeight: job.height } };
  }
  return { pixels, decodeMs: performance.now() - started };
}
