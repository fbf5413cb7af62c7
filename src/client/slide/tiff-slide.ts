// Pyramidal TIFF and Aperio SVS with no system library: geotiff.js parses the IFDs and tags (the
// pyramid, MPP, compression); the pixels come from libvips' own TIFF reader in sharp (libtiff and
// libjpeg-turbo), a band of several TIFF tiles of one tile row per call. A sharp call has a fixed
// cost of about 1 CPU-ms whatever its size, more than decoding a 256x256 JPEG tile, so a call per
// TIFF tile spent most of a slide's read time on it. Decoded bands are kept in a small LRU so that
// neighbouring output tiles, which share TIFF tiles, decode each one once.
import { availableParallelism } from 'node:os';
import { fromFile, type GeoTIFF, type GeoTIFFImage } from 'geotiff';
import sharp, { type OutputInfo } from 'sharp';
import { Semaphore } from '../semaphore.js';
import { SlideError, type Region, type Slide, type SlideLevel } from './slide.js';

const RGB = 2;
const YCBCR = 6;
const JPEG = 7;
/** Compressions read here (by libtiff): none, LZW, JPEG, deflate (two codes), PackBits. */
const DECODED = new Set([1, 5, JPEG, 8, 32946, 32773]);

/** Aperio writes `|MPP = 0.2520|` into level 0's ImageDescription. */
export function aperioMpp(description: string | undefined): number | null {
  const match = /\|\s*MPP\s*=\s*([0-9.]+)/.exec(description ?? '');
  return match ? Number(match[1]) : null;
}

function rational(value: unknown): number | null {
  if (typeof value === 'number') return value;
  if ((Array.isArray(value) || ArrayBuffer.isView(value)) && (value as ArrayLike<number>).length >= 2) {
    const [num, den] = value as ArrayLike<number> & number[];
    return Number(num) / Number(den);
  }
  return null;
}

/** MPP from XResolution and ResolutionUnit (2 inch, 3 centimetre); none for unit 1 (no unit). */
async function resolutionMpp(image: GeoTIFFImage): Promise<number | null> {
  const dir = image.fileDirectory;
  const unit = dir.hasTag('ResolutionUnit') ? Number(await dir.loadValue('ResolutionUnit')) : 2;
  const xres = dir.hasTag('XResolution') ? rational(await dir.loadValue('XResolution')) : null;
  if (!xres || xres <= 0 || (unit !== 2 && unit !== 3)) return null;
  return (unit === 3 ? 10000 : 25400) / xres;
}

interface Level extends SlideLevel {
  /** The level's directory in the file (libvips' `page`). */
  page: number;
  tileWidth: number;
  tileHeight: number;
  /** Tile columns and rows (edge tiles included). */
  tilesAcross: number;
  tilesDown: number;
  /** Width of a decoded band: a whole number of TIFF tiles, about BAND_PIXELS wide. */
  bandWidth: number;
}

/** Band width to aim at: 8 tiles of 256 (measured per 256x256 tile of a 0.25 MPP SVS: 3.3 CPU-ms
 *  as one JPEG per call, 1.3 as bands of 4 tiles, 1.0-1.2 as 8, 0.8-1.0 as 16 or whole rows);
 *  wider bands decode more glass beside the tissue. */
const BAND_PIXELS = 2048;

/** Bands decoded at once: half the cores. Decodes in parallel cost more CPU in all (on 2 cores, 16
 *  tiles in flight, CPU-ms per tile read and encoded: 8.1-9.5 with one at a time, 9.9-10.4 with
 *  two, 10.7-11.0 with four); one decoder still reads ~200 tiles/s of the bench slide. */
const DECODERS = Math.max(1, Math.min(4, Math.floor(availableParallelism() / 2)));

interface Band {
  data: Buffer;
  /** Where it lies in the level, and its size. */
  left: number;
  top: number;
  width: number;
  height: number;
}

export class TiffSlide implements Slide {
  readonly reader = 'tiff' as const;
  private readonly cache = new Map<string, Promise<Band>>();
  private cacheBands: number;
  /** Bands cut to the regions expected, per level and tile row (see expect). */
  private readonly plans = new Map<number, Map<number, Int32Array>>();
  private readonly decoding = new Semaphore(DECODERS);

  private constructor(
    readonly path: string,
    private readonly tiff: GeoTIFF,
    private readonly pyramid: Level[],
    readonly mpp: number | null,
  ) {
    const l = pyramid[0];
    // Output tiles are read row by row, and a row of them spans up to three tile rows (448-pixel
    // regions over 256-pixel tiles), the last of which the next row starts in: keep three.
    const across = Math.ceil(l.width / l.bandWidth);
    this.cacheBands = Math.max(16, 3 * across + 4);
  }

  get levels(): SlideLevel[] {
    return this.pyramid.map(({ width, height, downsample }) => ({ width, height, downsample }));
  }

  static async open(path: string): Promise<TiffSlide> {
    const tiff = await fromFile(path);
    const count = await tiff.getImageCount();
    const images = await Promise.all(Array.from({ length: count }, (_, i) => tiff.getImage(i)));
    // Pyramid levels are the tiled RGB images with level 0's aspect ratio; SVS thumbnails, labels
    // and macro images are stripped and are left out.
    const tiled = images.filter((im) => im.isTiled && im.getSamplesPerPixel() >= 3);
    if (!tiled.length) throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: no tiled RGB image in this TIFF (a flat image is not a slide pyramid)`);
    const base = tiled[0];
    const aspect = base.getWidth() / base.getHeight();
    const pyramid: Level[] = [];
    for (const image of tiled) {
      if (Math.abs(image.getWidth() / image.getHeight() - aspect) > 0.02 * aspect && image !== base) continue;
      const photometric = Number(await image.fileDirectory.loadValue('PhotometricInterpretation'));
      const compression = Number(image.fileDirectory.hasTag('Compression') ? await image.fileDirectory.loadValue('Compression') : 1);
      if (!DECODED.has(compression)) throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: TIFF compression ${compression} (JPEG 2000 is 33003/33005) needs libopenslide0`);
      if (photometric !== RGB && !(photometric === YCBCR && compression === JPEG)) {
        throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: photometric interpretation ${photometric} is not RGB; install libopenslide0 to read it through OpenSlide`);
      }
      if (image.getBitsPerSample() !== 8) throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: ${image.getBitsPerSample()} bits per sample, expected 8`);
      const tileWidth = image.getTileWidth();
      const tileHeight = image.getTileHeight();
      pyramid.push({
        page: images.indexOf(image),
        width: image.getWidth(),
        height: image.getHeight(),
        downsample: (base.getWidth() / image.getWidth() + base.getHeight() / image.getHeight()) / 2,
        tileWidth,
        tileHeight,
        tilesAcross: Math.ceil(image.getWidth() / tileWidth),
        tilesDown: Math.ceil(image.getHeight() / tileHeight),
        bandWidth: tileWidth * Math.max(1, Math.round(BAND_PIXELS / tileWidth)),
      });
    }
    pyramid.sort((a, b) => a.downsample - b.downsample);
    const description = base.fileDirectory.hasTag('ImageDescription') ? String(await base.fileDirectory.loadValue('ImageDescription')) : undefined;
    const mpp = aperioMpp(description) ?? (await resolutionMpp(base));
    return new TiffSlide(path, tiff, pyramid, mpp);
  }

  /** Bands cut to the regions that will be read: per level and tile row, for each tile column the
   *  first and last+1 tile of its band (runs of needed tiles, at most a band's width each), or -1
   *  for a tile no expected region needs. */
  expect(level: number, regions: readonly Region[]): void {
    const l = this.pyramid[level];
    const across = l.tilesAcross;
    const perBand = l.bandWidth / l.tileWidth;
    const needed = new Map<number, Uint8Array>();
    for (const r of regions) {
      const [tx0, tx1, ty0, ty1] = this.tileSpan(l, r.x, r.y, r.w, r.h);
      for (let ty = ty0; ty < ty1; ty++) {
        let row = needed.get(ty);
        if (!row) needed.set(ty, (row = new Uint8Array(across)));
        row.fill(1, tx0, tx1);
      }
    }
    const rows = new Map<number, Int32Array>();
    let most = 0;
    for (const [ty, row] of needed) {
      const bands = new Int32Array(across * 2).fill(-1);
      let count = 0;
      for (let tx = 0; tx < across; ) {
        if (!row[tx]) {
          tx++;
          continue;
        }
        let end = tx;
        while (end < across && row[end] && end - tx < perBand) end++;
        for (let k = tx; k < end; k++) bands.set([tx, end], k * 2);
        count++;
        tx = end;
      }
      rows.set(ty, bands);
      most = Math.max(most, count);
    }
    this.plans.set(level, rows);
    this.cacheBands = Math.max(this.cacheBands, 3 * most + 4);
  }

  /** Tile columns [tx0, tx1) and rows [ty0, ty1) of a level that a region overlaps. */
  private tileSpan(l: Level, x: number, y: number, w: number, h: number): [number, number, number, number] {
    return [
      Math.max(0, Math.floor(x / l.tileWidth)),
      Math.min(l.tilesAcross, Math.ceil((x + w) / l.tileWidth)),
      Math.max(0, Math.floor(y / l.tileHeight)),
      Math.min(l.tilesDown, Math.ceil((y + h) / l.tileHeight)),
    ];
  }

  /** The band holding tile (tx, ty), as its first and last+1 tile: the expected one, else the
   *  fixed group of a band's width it falls in. */
  private bandOf(level: number, l: Level, tx: number, ty: number): [number, number] {
    const planned = this.plans.get(level)?.get(ty);
    if (planned && planned[tx * 2] >= 0) return [planned[tx * 2], planned[tx * 2 + 1]];
    const perBand = l.bandWidth / l.tileWidth;
    const first = tx - (tx % perBand);
    return [first, Math.min(first + perBand, l.tilesAcross)];
  }

  /** The decoded RGB of tiles [tx0, tx1) of tile row `ty` of a level, clipped to its extent. */
  private band(level: number, ty: number, tx0: number, tx1: number): Promise<Band> {
    const key = `${level}:${ty}:${tx0}:${tx1}`;
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const decoded = this.decodeBand(this.pyramid[level], ty, tx0, tx1);
    decoded.catch(() => this.cache.delete(key));
    this.cache.set(key, decoded);
    if (this.cache.size > this.cacheBands) this.cache.delete(this.cache.keys().next().value!);
    return decoded;
  }

  private async decodeBand(l: Level, ty: number, tx0: number, tx1: number): Promise<Band> {
    const release = await this.decoding.acquire();
    try {
      return await this.decodeBandNow(l, ty, tx0, tx1);
    } finally {
      release();
    }
  }

  private async decodeBandNow(l: Level, ty: number, tx0: number, tx1: number): Promise<Band> {
    const left = tx0 * l.tileWidth;
    const top = ty * l.tileHeight;
    const width = Math.min(tx1 * l.tileWidth, l.width) - left;
    const height = Math.min(l.tileHeight, l.height - top);
    let result: { data: Buffer; info: OutputInfo };
    try {
      result = await sharp(this.path, { page: l.page, limitInputPixels: false, sequentialRead: false }).extract({ left, top, width, height }).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    } catch (err) {
      throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: directory ${l.page}, ${width}x${height} at ${left},${top}: ${(err as Error).message}`);
    }
    const { data, info } = result;
    if (info.width !== width || info.height !== height || info.channels !== 3) throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: directory ${l.page} decodes to ${info.width}x${info.height}x${info.channels} at ${left},${top}, expected ${width}x${height}x3`);
    return { data, left, top, width, height };
  }

  async readRegion(level: number, x: number, y: number, w: number, h: number, into?: Uint8Array): Promise<Uint8Array> {
    const l = this.pyramid[level];
    const inside = x >= 0 && y >= 0 && x + w <= l.width && y + h <= l.height;
    const out = into?.length === w * h * 3 ? into : Buffer.allocUnsafe(w * h * 3);
    if (!inside) out.fill(255);
    const [tx0, tx1, ty0, ty1] = this.tileSpan(l, x, y, w, h);
    const jobs: Promise<void>[] = [];
    for (let ty = ty0; ty < ty1; ty++) {
      for (let tx = tx0; tx < tx1; ) {
        const [first, end] = this.bandOf(level, l, tx, ty);
        tx = end;
        jobs.push(
          this.band(level, ty, first, end).then((band) => {
            // The overlap of this band with the region (the band is already clipped to the level).
            const left = Math.max(x, band.left);
            const right = Math.min(x + w, band.left + band.width);
            for (let row = Math.max(y, band.top); row < Math.min(y + h, band.top + band.height); row++) {
              const src = ((row - band.top) * band.width + (left - band.left)) * 3;
              band.data.copy(out, ((row - y) * w + (left - x)) * 3, src, src + (right - left) * 3);
            }
          }),
        );
      }
    }
    await Promise.all(jobs);
    return out;
  }

  async close(): Promise<void> {
    this.cache.clear();
    this.tiff.close();
  }
}
