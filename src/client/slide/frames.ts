// Decodes a band of frames, each tile's own encoded bytes (DICOM frames, a remote TIFF's tiles),
// on the reader pool, each once, straight into place: JPEG baseline by libturbojpeg (libvips in
// sharp without it), JPEG 2000 by OpenJPEG, a TIFF's LZW, deflate, PackBits or uncompressed tiles
// by geotiff.js' decoders, uncompressed RGB copied; a tile with no frame is background (white, as
// past a slide's edges). decodeBandJob takes any band: frames here, else bands.ts' decodeBand.
import { readSync } from 'node:fs';
import type { getDecoder as GetDecoder } from 'geotiff';
import sharp from 'sharp';
import { decodeBand, fileOf, paintBackground } from './bands.js';
import type { BandJob, FrameBytes, TiffCoding } from './slide.js';
import { decodeJpegInto, hasTurboJpeg } from './turbojpeg.js';
import type { J2KDecoder } from '@cornerstonejs/codec-openjpeg/decodewasmjs';

function bytesOf(frame: FrameBytes, k: number, job: BandJob): Uint8Array {
  if ('bytes' in frame) return frame.bytes;
  const data = Buffer.allocUnsafe(frame.length);
  if (readSync(fileOf(frame.path), data, 0, frame.length, frame.offset) !== frame.length)
    throw new Error(`${frame.path}: the file ends inside frame ${k + 1} of the band at ${job.left},${job.top}`);
  return data;
}

let j2k: Promise<J2KDecoder> | undefined;
/** What OpenJPEG printed during the decode in hand: an "[ERROR] ..." line is its only sign of a
 *  codestream it could not decode (the decoder returns, keeping the last frame's pixels). */
let printed: string[] = [];

/** OpenJPEG's colour space of an image it has turned into RGB (OPJ_CLRSPC_SRGB). */
const SRGB = 1;

/** Each component's subsampling (XRsiz, YRsiz) from a codestream's SIZ segment, which follows
 *  its SOC marker (ITU-T T.800 A.5.1); null when the bytes do not start so. */
function subsampling(data: Uint8Array): [number, number][] | null {
  if (data.length < 42 || data[0] !== 0xff || data[1] !== 0x4f || data[2] !== 0xff || data[3] !== 0x51) return null;
  const count = (data[40] << 8) | data[41];
  if (data.length < 42 + 3 * count) return null;
  return Array.from({ length: count }, (_, c) => [data[43 + 3 * c], data[44 + 3 * c]]);
}

/** A JPEG 2000 frame as RGB, by OpenJPEG (cornerstonejs' WebAssembly build), one decoder a
 *  thread, made on first use. `ycbcr`: its components are Y, Cb, Cr (Aperio's 33003). OpenJPEG
 *  turns those to RGB itself when the chroma is subsampled (as Aperio writes it: half width), with
 *  its own rounding, a level or two from OpenSlide's; at full size they are turned here, as
 *  OpenSlide (and libjpeg) do. */
async function decodeJ2k(data: Uint8Array, job: BandJob, ycbcr: boolean): Promise<Uint8Array> {
  j2k ??= (async () => {
    const { default: factory } = await import('@cornerstonejs/codec-openjpeg/decodewasmjs');
    // OpenJPEG's lines would go to stdout: kept for the decode in hand.
    const keep = (line: string) => void printed.push(line);
    const codec = await factory({ print: keep, printErr: keep });
    return new codec.J2KDecoder();
  })();
  const decoder = await j2k;
  decoder.getEncodedBuffer(data.length).set(data);
  printed = [];
  decoder.decode();
  const error = printed.find((line) => line.startsWith('[ERROR]'));
  if (error) throw new Error(`a JPEG 2000 frame OpenJPEG cannot decode: ${error.slice('[ERROR] '.length)}`);
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
  // Subsampled components come interleaved only once OpenJPEG has turned them to RGB (4:2:2 and
  // 4:2:0 as Y, Cb, Cr); others (4:4:0) would be read past their planes.
  const converted = decoder.getColorSpace() === SRGB;
  const factors = subsampling(data) ?? [];
  if (!converted && factors.some(([dx, dy]) => dx !== 1 || dy !== 1))
    throw new Error(
      `a JPEG 2000 frame whose components are subsampled ${factors.map(([dx, dy]) => `${dx}x${dy}`).join(', ')}, which OpenJPEG does not turn to RGB: not read`,
    );
  const pixels = decoder.getDecodedBuffer();
  return ycbcr && !converted ? ycbcrToRgb(pixels) : pixels;
}

/** Interleaved full-range Y, Cb, Cr (JFIF) to RGB, in place: libjpeg's fixed-point arithmetic,
 *  which OpenSlide's tables also follow; clamped to 0-255 by the array. */
function ycbcrToRgb(pixels: Uint8Array): Uint8Array {
  const rgb = new Uint8ClampedArray(pixels.buffer, pixels.byteOffset, pixels.length);
  for (let i = 0; i < rgb.length; i += 3) {
    const y = rgb[i];
    const cb = rgb[i + 1] - 128;
    const cr = rgb[i + 2] - 128;
    rgb[i] = y + ((91881 * cr + 32768) >> 16);
    rgb[i + 1] = y + ((-22554 * cb - 46802 * cr + 32768) >> 16);
    rgb[i + 2] = y + ((116130 * cb + 32768) >> 16);
  }
  return pixels;
}

type TiffDecoder = Awaited<ReturnType<typeof GetDecoder>>;
const tiffDecoders = new Map<string, Promise<TiffDecoder>>();

/** geotiff.js' decoder registry, imported from its own file: the package's entry point brings its
 *  worker pool, whose web-worker dependency takes any worker thread that imports it for one of
 *  its own (and fails in the reader pool's). */
let registry: Promise<{ getDecoder: typeof GetDecoder }> | undefined;
const geotiffDecoders = () =>
  (registry ??= import(new URL('./compression/index.js', import.meta.resolve('geotiff')).href));

/** A TIFF tile as RGB: decoded (predictor undone) by geotiff.js, its extra samples dropped. */
async function decodeTiffTile(data: Uint8Array, job: BandJob, tiff: TiffCoding): Promise<Uint8Array> {
  const key = `${tiff.compression}/${tiff.predictor}/${tiff.samples}/${job.tileWidth}x${job.tileHeight}`;
  let decoder = tiffDecoders.get(key);
  if (!decoder) {
    decoder = geotiffDecoders().then(({ getDecoder }) =>
      getDecoder(tiff.compression, {
        tileWidth: job.tileWidth,
        tileHeight: job.tileHeight,
        predictor: tiff.predictor,
        bitsPerSample: Array(tiff.samples).fill(8),
        planarConfiguration: 1,
        samplesPerPixel: tiff.samples,
      }),
    );
    tiffDecoders.set(key, decoder);
  }
  const decoded = new Uint8Array(await (await decoder).decode(data.slice().buffer));
  const pixels = job.tileWidth * job.tileHeight;
  if (decoded.length < pixels * tiff.samples)
    throw new Error(`a TIFF tile of ${decoded.length} bytes decoded, expected ${pixels * tiff.samples}`);
  if (tiff.samples === 3) return decoded;
  const rgb = new Uint8Array(pixels * 3);
  for (let i = 0, j = 0; i < rgb.length; i += 3, j += tiff.samples) rgb.set(decoded.subarray(j, j + 3), i);
  return rgb;
}

/** Any band job, decoded into `into`: its frames here, else its TIFF tiles by bands.ts. */
export const decodeBandJob = (job: BandJob, into: Uint8Array) =>
  job.frames ? decodeFrames(job, into) : decodeBand(job, into);

export async function decodeFrames(job: BandJob, into: Uint8Array): Promise<void> {
  const { coding, tiles } = job.frames!;
  const row = job.tileWidth * 3;
  const stride = job.tiles * row;
  for (let k = 0; k < tiles.length; k++) {
    const frame = tiles[k];
    const at = k * row;
    if (!frame) {
      paintBackground(job, into, k);
      continue;
    }
    const data = bytesOf(frame, k, job);
    if (data.length === 0) throw new Error(`frame ${k + 1} of the band at ${job.left},${job.top} is empty (0 bytes)`);
    let pixels: Uint8Array;
    if (coding === 'jpeg' && hasTurboJpeg()) {
      decodeJpegInto(data, into.subarray(at), job.tileWidth, job.tileHeight, stride);
      continue;
    }
    if (coding === 'tiff') pixels = await decodeTiffTile(data, job, job.frames!.tiff!);
    else if (coding === 'j2k' || coding === 'j2k-ycbcr') pixels = await decodeJ2k(data, job, coding === 'j2k-ycbcr');
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
