// Every format OpenSlide reads (SVS with JPEG 2000, NDPI, MRXS, SCN, ...) through libopenslide
// (Debian: libopenslide0), called with koffi; optional: the library is looked for at run time.
// read_region runs on koffi's worker threads, so regions are read in parallel with the HTTP work.
import sharp from 'sharp';
import { loadLibrary } from './native-library.js';
import { checkedMpp, SlideError, type Slide, type SlideLevel } from './slide.js';

interface OpenSlideLib {
  open: (path: string) => unknown;
  getError: (osr: unknown) => string | null;
  levelCount: (osr: unknown) => number;
  levelDimensions: (osr: unknown, level: number, w: [number], h: [number]) => void;
  levelDownsample: (osr: unknown, level: number) => number;
  property: (osr: unknown, name: string) => string | null;
  readRegion: {
    async: (
      osr: unknown,
      dest: Uint32Array,
      x: number,
      y: number,
      level: number,
      w: number,
      h: number,
      cb: (err: unknown) => void,
    ) => void;
  };
  close: (osr: unknown) => void;
}

const NAMES = ['libopenslide.so.1', 'libopenslide.so.0', 'libopenslide.dylib', 'libopenslide-1.dll'];
let lib: OpenSlideLib | null | undefined;

/** The library's functions, or null when no libopenslide is installed. */
export function openSlideLibrary(): OpenSlideLib | null {
  if (lib !== undefined) return lib;
  // TILE_INFER_OPENSLIDE=0: read as a host without it would (the built-in readers only).
  const so = process.env.TILE_INFER_OPENSLIDE === '0' ? null : loadLibrary(NAMES);
  lib = so && {
    open: so.func('void *openslide_open(const char *filename)'),
    getError: so.func('const char *openslide_get_error(void *osr)'),
    levelCount: so.func('int32_t openslide_get_level_count(void *osr)'),
    levelDimensions: so.func(
      'void openslide_get_level_dimensions(void *osr, int32_t level, _Out_ int64_t *w, _Out_ int64_t *h)',
    ),
    levelDownsample: so.func('double openslide_get_level_downsample(void *osr, int32_t level)'),
    property: so.func('const char *openslide_get_property_value(void *osr, const char *name)'),
    readRegion: so.func(
      'void openslide_read_region(void *osr, _Out_ uint32_t *dest, int64_t x, int64_t y, int32_t level, int64_t w, int64_t h)',
    ),
    close: so.func('void openslide_close(void *osr)'),
  };
  return lib;
}

export class OpenSlideSlide implements Slide {
  readonly reader = 'openslide' as const;

  private constructor(
    readonly path: string,
    private readonly lib: OpenSlideLib,
    private readonly osr: unknown,
    readonly levels: SlideLevel[],
    readonly mpp: number | null,
    readonly mppError: string | null,
  ) {}

  static open(path: string): OpenSlideSlide {
    const lib = openSlideLibrary();
    if (!lib)
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${path}: reading this format needs libopenslide (Debian/Ubuntu: apt-get install libopenslide0)`,
      );
    const osr = lib.open(path);
    if (!osr) throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: OpenSlide does not recognise this file`);
    const error = lib.getError(osr);
    if (error) {
      lib.close(osr);
      throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${path}: OpenSlide: ${error}`);
    }
    const levels = Array.from({ length: lib.levelCount(osr) }, (_, level) => {
      const w: [number] = [0];
      const h: [number] = [0];
      lib.levelDimensions(osr, level, w, h);
      return { width: Number(w[0]), height: Number(h[0]), downsample: lib.levelDownsample(osr, level) };
    });
    const value = lib.property(osr, 'openslide.mpp-x');
    const mpp =
      value === null ? { mpp: null, error: null } : checkedMpp(Number(value), `openslide.mpp-x ${value}`, path);
    return new OpenSlideSlide(path, lib, osr, levels, mpp.mpp, mpp.error);
  }

  readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array> {
    const argb = new Uint32Array(w * h);
    const d = this.levels[level].downsample;
    return new Promise((resolve, reject) => {
      // OpenSlide takes the top-left corner in level-0 pixels.
      this.lib.readRegion.async(this.osr, argb, Math.round(x * d), Math.round(y * d), level, w, h, (err) => {
        const error = err ?? this.lib.getError(this.osr);
        if (error)
          return reject(new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: OpenSlide: ${String(error)}`));
        // Premultiplied ARGB composited over white: transparent pixels (outside the scanned
        // area) become white, opaque ones keep their colour.
        const rgb = new Uint8Array(w * h * 3);
        for (let i = 0; i < argb.length; i++) {
          const p = argb[i];
          const glass = 255 - (p >>> 24);
          rgb[i * 3] = ((p >>> 16) & 255) + glass;
          rgb[i * 3 + 1] = ((p >>> 8) & 255) + glass;
          rgb[i * 3 + 2] = (p & 255) + glass;
        }
        resolve(rgb);
      });
    });
  }

  /** OpenSlide levels are a real pyramid, so the level nearest 8 MPP is small; one that is not
   *  (a damaged file) is refused before it is allocated. */
  async overview(level: number, width: number, height: number): Promise<Buffer> {
    const { width: lw, height: lh } = this.levels[level];
    if (lw * lh > 2 ** 28)
      throw new SlideError(
        'TILE_ERR_SLIDE_TOO_LARGE',
        `${this.path}: the level nearest 8 µm/px is ${lw}x${lh} pixels, too large to read whole`,
      );
    const region = await this.readRegion(level, 0, 0, lw, lh);
    if (lw === width && lh === height) return Buffer.from(region.buffer, region.byteOffset, region.byteLength);
    return sharp(region, { raw: { width: lw, height: lh, channels: 3 } })
      .resize(width, height, { kernel: 'linear', fit: 'fill' })
      .raw()
      .toBuffer();
  }

  async close(): Promise<void> {
    this.lib.close(this.osr);
  }
}
