// Test tensors shared by the v2 REST and gRPC tests: tiles as the protocol's image input, and an
// exact comparison of outputs.
import { decodePng } from '../../src/tile/png.js';
import type { Tensor } from './v2-client.js';

export const pixels = async (png: Buffer) => Buffer.from((await decodePng(png)).data);
export const image = (rgb: Buffer[], size: number): Tensor => ({
  name: 'image',
  datatype: 'UINT8',
  shape: [rgb.length, size, size, 3],
  data: Buffer.concat(rgb),
});
export const pngs = (files: Buffer[]): Tensor => ({
  name: 'image',
  datatype: 'BYTES',
  shape: [files.length],
  data: files,
});
export const same = (a: ArrayLike<number>, b: ArrayLike<number>) =>
  a.length === b.length && Array.from(a).every((v, i) => Object.is(v, b[i]));
