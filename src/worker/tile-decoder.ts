// Turns a TileJob's PNG bytes into the model's input pixels, or into field errors naming what was
// expected. Runs in the worker, and decodes on the libuv pool (decode_threads threads), so one
// worker decodes on several cores while its JS thread answers IPC.
import type { FieldError, TileJob } from '../ipc/protocol.js';
import { decodePng, type Pixels } from '../tile/png.js';

const IMAGE_LOC = ['body', 'image_data'];

export type Decoded = { pixels: Pixels; decodeMs: number } | { errors: FieldError[] };

export async function decodeTile(job: TileJob): Promise<Decoded> {
  const started = performance.now();
  let pixels: Pixels;
  try {
    pixels = await decodePng(Buffer.from(job.png.buffer, job.png.byteOffset, job.png.byteLength));
  } catch (err) {
    return { errors: [{ loc: IMAGE_LOC, msg: `Value error, image_data is not a decodable PNG: ${(err as Error).message}`, type: 'value_error' }] };
  }
  if (pixels.width !== job.width || pixels.height !== job.height) {
    return { errors: [{ loc: IMAGE_LOC, msg: `Value error, PNG is ${pixels.width}x${pixels.height} pixels, expected width x height = ${job.width}x${job.height}`, type: 'value_error' }] };
  }
  return { pixels, decodeMs: performance.now() - started };
}
