// Decodes a band of DICOM frames on the reader pool, each frame once, straight into place: JPEG
// baseline by libturbojpeg (libvips in sharp without it), JPEG 2000 by OpenJPEG, uncompressed RGB
// copied; a tile with no frame is background (white, as past a slide's edges).
import { readSync } from 'node:fs';
import sharp from 'sharp';
import { fileOf } from '../bands.js';
import type { BandJob, FrameBytes } from '../slide.js';
import { decodeJpegInto, hasTurboJpeg } from '../turbojpeg.js';
import type { J2KDecoder } from '@cornerstonejs/codec-openjpeg/decodewasmjs';

function bytesOf(frame: FrameBytes, k: number, job: BandJob): Uint8Array {
  if ('bytes' in frame) return frame.bytes;
  const data = Buffer.allocUnsafe(frame.length);
  if (readSync(fileOf(frame.path), data, 0, frame.length, frame.offset) !== frame.length)
    throw new Error(`${frame.path}: the file ends inside frame ${k + 1} of the band at ${job.left},${job.top}`);
  return data;
}

let j2k: Promise<J2KDecoder> | undefined;

/** A JPEG 2000 frame as RGB, by OpenJPEG (cornerstonejs' WebAssembly build), one decoder a
 *  thread, made on first use. */
async function decodeJ2k(data: Uint8Array, job: BandJob): Promise<Uint8Array> {
  j2k ??= (async () => {
    const { default: factory } = await import('@cornerstonejs/codec-openjpeg/decodewasmjs');
    // OpenJPEG's [INFO] lines would go to stdout.
    const codec = await factory({ print: () => {}, printErr: () => {} });
    return new codec.J2KDecoder();
  })();
  const decoder = await j2k;
  decoder.getEncodedBuffer(data.length).set(data);
  decoder.decode();
  const info = decoder.getFrameInfo();
  if (
    info.width !== job.tileWidth ||
    info.height !== job.tileHeight ||
    info.componentCount !== 3 ||
    info.bitsPerSample !== 8
  )
    throw new Error(
      `a JPEG 2000 frame of ${info.width}x${info.height}, ${info.componentCount} components of ${info.bitsPerSample} bits; expected ${job.tileWidth}x${job.tileHeight} RGB, 8 bits`,
    );
  return decoder.getDecodedBuffer();
}

export async function decodeFrames(job: BandJob, into: Uint8Array): Promise<void> {
  const { coding, tiles } = job.frames!;
  const row = job.tileWidth * 3;
  const stride = job.tiles * row;
  for (let k = 0; k < tiles.length; k++) {
    const frame = tiles[k];
    const at = k * row;
    if (!frame) {
      for (let y = 0; y < job.tileHeight; y++) into.fill(255, at + y * stride, at + y * stride + row);
      continue;
    }
    const data = bytesOf(frame, k, job);
    let pixels: Uint8Array;
    if (coding === 'jpeg' && hasTurboJpeg()) {
      decodeJpegInto(data, into.subarray(at), job.tileWidth, job.tileHeight, stride);
      continue;
    }
    if (coding === 'j2k') pixels = await decodeJ2k(data, job);
    else if (coding === 'jpeg') {
      const { data: rgb, info } = await sharp(data).removeAlpha().raw().toBuffer({ resolveWithObject: true });
      if (info.width !== job.tileWidth || info.height !== job.tileHeight)
        throw new Error(`a frame of ${info.width}x${info.height}, expected ${job.tileWidth}x${job.tileHeight}`);
      pixels = rgb;
    } else pixels = data;
    if (pixels.length < row * job.tileHeight)
      throw new Error(`a frame of ${pixels.length} bytes, expected ${row * job.tileHeight}`);
    for (let y = 0; y < job.tileHeight; y++) into.set(pixels.subarray(y * row, (y + 1) * row), at + y * stride);
  }
}
