// Turns a TileJob's image into the model's input pixels, or into field errors naming what was
// expected. Runs in the worker: a PNG is decoded on the libuv pool (decode_threads threads), so
// one worker decodes on several cores while its JS thread answers IPC; raw RGB pixels are used as
// they came.
import type { FieldError, TileJob } from '../ipc/protocol.js';
import { decodePng, type Pixels } from '../tile/png.js';

export type Decoded = { pixels: Pixels; decodeMs: number } | { errors: FieldError[] };

export async function decodeTile(job: TileJob): Promise<Decoded> {
  const started = performance.now();
  const { format, bytes, loc } = job.image;
  const fail = (msg: string): Decoded => ({ errors: [{ loc, msg: `Value error, ${msg}`, type: 'value_error' }] });
  if (format === 'rgb') {
    // The front checked the length; a job is still never trusted to size anything.
    if (bytes.length !== job.width * job.height * 3)
      return fail(`a raw RGB body has width x height x 3 = ${job.width * job.height * 3} bytes, got ${bytes.length}`);
    return {
      pixels: { width: job.width, height: job.height, channels: 3, data: bytes },
      decodeMs: performance.now() - started,
    };
  }
  const subject = loc.length > 1 ? String(loc.at(-1)) : 'the body';
  let pixels: Pixels;
  try {
    pixels = await decodePng(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  } catch (err) {
    return fail(`${subject} is not a decodable PNG: ${(err as Error).message}`);
  }
  if (pixels.width !== job.width || pixels.height !== job.height) {
    return fail(`PNG is ${pixels.width}x${pixels.height} pixels, expected width x height = ${job.width}x${job.height}`);
  }
  return { pixels, decodeMs: performance.now() - started };
}
