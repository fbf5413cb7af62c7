// libjpeg-turbo's TurboJPEG API through koffi, for the JPEG tiles of TIFF and SVS slides: a call
// decodes one 256x256 tile in ~0.3 CPU-ms, where a libvips pipeline costs ~1 ms before it decodes
// anything. Optional: the library is looked for at run time (Debian/Ubuntu libturbojpeg0, Fedora
// turbojpeg, Homebrew jpeg-turbo); without it the slide's tiles are decoded by libvips. Both are
// libjpeg-turbo with its defaults (accurate integer IDCT, smooth chroma upsampling), so the pixels
// are the same, which test/slide-pixels.test.ts checks. Each thread opens its own decompressor.
import { loadLibrary } from './native-library.js';

interface TurboLib {
  init: () => unknown;
  header: (
    h: unknown,
    jpeg: Uint8Array,
    size: number,
    w: [number],
    hh: [number],
    subsamp: [number],
    colorspace: [number],
  ) => number;
  decompress: (
    h: unknown,
    jpeg: Uint8Array,
    size: number,
    dst: Uint8Array,
    w: number,
    pitch: number,
    hh: number,
    format: number,
    flags: number,
  ) => number;
  error: (h: unknown) => string;
}

const NAMES = [
  'libturbojpeg.so.0',
  'libturbojpeg.so',
  'libturbojpeg.dylib',
  '/opt/homebrew/lib/libturbojpeg.dylib',
  '/usr/local/lib/libturbojpeg.dylib',
  'turbojpeg.dll',
];
const TJPF_RGB = 0;
/** TJCS_RGB and TJCS_YCbCr: the colour space libjpeg infers from the stream's markers. */
export const JPEG_RGB = 0;
export const JPEG_YCBCR = 1;

let lib: TurboLib | null | undefined;
let handle: unknown = null;

function load(): TurboLib | null {
  if (lib !== undefined) return lib;
  const so = process.env.TILE_INFER_TURBOJPEG === '0' ? null : loadLibrary(NAMES);
  lib = so && {
    init: so.func('void *tjInitDecompress()'),
    header: so.func(
      'int tjDecompressHeader3(void *h, const uint8_t *buf, unsigned long size, _Out_ int *w, _Out_ int *hh, _Out_ int *subsamp, _Out_ int *colorspace)',
    ),
    decompress: so.func(
      'int tjDecompress2(void *h, const uint8_t *buf, unsigned long size, uint8_t *dst, int w, int pitch, int hh, int format, int flags)',
    ),
    error: so.func('const char *tjGetErrorStr2(void *h)'),
  };
  return lib;
}

/** Whether libturbojpeg is installed (TILE_INFER_TURBOJPEG=0 turns it off, for comparisons). */
export const hasTurboJpeg = () => load() !== null;

export interface JpegHeader {
  width: number;
  height: number;
  colorspace: number;
}

function decompressor(): { lib: TurboLib; h: unknown } {
  const l = load();
  if (!l) throw new Error('libturbojpeg is not installed');
  handle ??= l.init();
  return { lib: l, h: handle };
}

export function jpegHeader(jpeg: Uint8Array): JpegHeader {
  const { lib: l, h } = decompressor();
  const w: [number] = [0];
  const hh: [number] = [0];
  const subsamp: [number] = [0];
  const colorspace: [number] = [0];
  if (l.header(h, jpeg, jpeg.length, w, hh, subsamp, colorspace) !== 0) throw new Error(l.error(h));
  return { width: w[0], height: hh[0], colorspace: colorspace[0] };
}

/** Decodes a JPEG of exactly `width` x `height` (checked: TurboJPEG would scale a larger one to
 *  fit) as RGB into `into`, rows `pitch` bytes apart. Warnings (a truncated stream) are errors, as
 *  they are for libvips' TIFF reader in sharp. */
export function decodeJpegInto(jpeg: Uint8Array, into: Uint8Array, width: number, height: number, pitch: number): void {
  const { lib: l, h } = decompressor();
  if (into.byteLength < (height - 1) * pitch + width * 3)
    throw new RangeError(`a ${width}x${height} JPEG does not fit its ${into.byteLength}-byte destination`);
  const head = jpegHeader(jpeg);
  if (head.width !== width || head.height !== height)
    throw new Error(`JPEG of ${head.width}x${head.height}, expected ${width}x${height}`);
  if (l.decompress(h, jpeg, jpeg.length, into, width, pitch, height, TJPF_RGB, 0) !== 0) throw new Error(l.error(h));
}
