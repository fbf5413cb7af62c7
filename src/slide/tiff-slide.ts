// Pyramidal TIFF and Aperio SVS with no system library: geotiff.js parses the IFDs and tags and
// decodes LZW, deflate and raw tiles; JPEG tiles (most slides) are read as bytes and decoded by
// libjpeg-turbo inside sharp's bundled libvips, ~10x faster than a JavaScript JPEG decoder and off
// the main thread. Decoded tiles are kept in a small LRU so that neighbouring output tiles, which
// share TIFF tiles, decode each one once.
import { open, type FileHandle } from 'node:fs/promises';
import { fromFile, type GeoTIFF, type GeoTIFFImage } from 'geotiff';
import sharp from 'sharp';
import { SlideError, type Slide, type SlideLevel } from './slide.js';

const RGB = 2;
const YCBCR = 6;
const JPEG = 7;
/** Compressions decoded here: none, LZW, JPEG, deflate (two codes), PackBits. */
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
  image: GeoTIFFImage;
  tileWidth: number;
  tileHeight: number;
  samples: number;
  /** Shared JPEG tables (Aperio) to put before each abbreviated tile stream; null when not JPEG. */
  jpegTables: Buffer | null;
  jpeg: boolean;
}

/** A complete JPEG from shared tables (SOI, DQT, DHT, EOI) and an abbreviated stream (SOI ...). */
const joinJpeg = (tables: Buffer | null, stream: Buffer) => (tables ? Buffer.concat([tables.subarray(0, tables.length - 2), stream.subarray(2)]) : stream);

export class TiffSlide implements Slide {
  readonly reader = 'tiff' as const;
  private readonly cache = new Map<string, Promise<Uint8Array>>();
  private readonly cacheTiles: number;

  private constructor(
    readonly path: string,
    private readonly tiff: GeoTIFF,
    private readonly file: FileHandle,
    private readonly pyramid: Level[],
    readonly mpp: number | null,
  ) {
    const across = Math.ceil(pyramid[0].width / pyramid[0].tileWidth);
    // Two rows of level-0 tiles: output tiles are read row by row and share TIFF tiles.
    this.cacheTiles = Math.max(64, 2 * across + 16);
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
    if (!tiled.length) throw new SlideError(`${path}: no tiled RGB image in this TIFF (a flat image is not a slide pyramid)`);
    const base = tiled[0];
    const aspect = base.getWidth() / base.getHeight();
    const pyramid: Level[] = [];
    for (const image of tiled) {
      if (Math.abs(image.getWidth() / image.getHeight() - aspect) > 0.02 * aspect && image !== base) continue;
      const photometric = Number(await image.fileDirectory.loadValue('PhotometricInterpretation'));
      const compression = Number(image.fileDirectory.hasTag('Compression') ? await image.fileDirectory.loadValue('Compression') : 1);
      if (!DECODED.has(compression)) throw new SlideError(`${path}: TIFF compression ${compression} (JPEG 2000 is 33003/33005) needs libopenslide0`);
      if (photometric !== RGB && !(photometric === YCBCR && compression === JPEG)) {
        throw new SlideError(`${path}: photometric interpretation ${photometric} is not RGB; install libopenslide0 to read it through OpenSlide`);
      }
      if (image.getBitsPerSample() !== 8) throw new SlideError(`${path}: ${image.getBitsPerSample()} bits per sample, expected 8`);
      pyramid.push({
        image,
        width: image.getWidth(),
        height: image.getHeight(),
        downsample: (base.getWidth() / image.getWidth() + base.getHeight() / image.getHeight()) / 2,
        tileWidth: image.getTileWidth(),
        tileHeight: image.getTileHeight(),
        samples: image.getSamplesPerPixel(),
        jpeg: compression === JPEG,
        jpegTables: compression === JPEG && image.fileDirectory.hasTag('JPEGTables') ? Buffer.from((await image.fileDirectory.loadValue('JPEGTables')) as Uint8Array) : null,
      });
    }
    pyramid.sort((a, b) => a.downsample - b.downsample);
    const description = base.fileDirectory.hasTag('ImageDescription') ? String(await base.fileDirectory.loadValue('ImageDescription')) : undefined;
    const mpp = aperioMpp(description) ?? (await resolutionMpp(base));
    return new TiffSlide(path, tiff, await open(path), pyramid, mpp);
  }

  /** The decoded RGB tile (tx, ty) of a level, full tile size (edge tiles padded white). */
  private tile(level: number, tx: number, ty: number): Promise<Uint8Array> {
    const key = `${level}:${tx}:${ty}`;
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const l = this.pyramid[level];
    const x0 = tx * l.tileWidth;
    const y0 = ty * l.tileHeight;
    const x1 = Math.min(l.width, x0 + l.tileWidth);
    const y1 = Math.min(l.height, y0 + l.tileHeight);
    const decoded = l.jpeg ? this.decodeJpeg(l, tx, ty) : this.decodeOther(l, x0, y0, x1, y1);
    decoded.catch(() => this.cache.delete(key));
    this.cache.set(key, decoded);
    if (this.cache.size > this.cacheTiles) this.cache.delete(this.cache.keys().next().value!);
    return decoded;
  }

  private async decodeJpeg(l: Level, tx: number, ty: number): Promise<Uint8Array> {
    const index = ty * Math.ceil(l.width / l.tileWidth) + tx;
    const offset = Number(await l.image.fileDirectory.loadValueIndexed('TileOffsets', index));
    const length = Number(await l.image.fileDirectory.loadValueIndexed('TileByteCounts', index));
    const bytes = Buffer.alloc(length);
    await this.file.read(bytes, 0, length, offset);
    const { data, info } = await sharp(joinJpeg(l.jpegTables, bytes)).removeAlpha().toColourspace('srgb').raw().toBuffer({ resolveWithObject: true });
    if (info.width !== l.tileWidth || info.height !== l.tileHeight) throw new SlideError(`${this.path}: tile ${tx},${ty} decodes to ${info.width}x${info.height}, expected ${l.tileWidth}x${l.tileHeight}`);
    return data;
  }

  private async decodeOther(l: Level, x0: number, y0: number, x1: number, y1: number): Promise<Uint8Array> {
    const data = (await l.image.readRasters({ window: [x0, y0, x1, y1], interleave: true })) as unknown as Uint8Array;
    const w = x1 - x0;
    const out = new Uint8Array(l.tileWidth * l.tileHeight * 3).fill(255);
    for (let y = 0; y < y1 - y0; y++) {
      for (let x = 0; x < w; x++) {
        const s = (y * w + x) * l.samples;
        const d = (y * l.tileWidth + x) * 3;
        out[d] = data[s];
        out[d + 1] = data[s + 1];
        out[d + 2] = data[s + 2];
      }
    }
    return out;
  }

  async readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array> {
    const l = this.pyramid[level];
    const out = new Uint8Array(w * h * 3).fill(255);
    const tx0 = Math.max(0, Math.floor(x / l.tileWidth));
    const ty0 = Math.max(0, Math.floor(y / l.tileHeight));
    const tx1 = Math.min(Math.ceil(l.width / l.tileWidth), Math.ceil((x + w) / l.tileWidth));
    const ty1 = Math.min(Math.ceil(l.height / l.tileHeight), Math.ceil((y + h) / l.tileHeight));
    const jobs: Promise<void>[] = [];
    for (let ty = ty0; ty < ty1; ty++) {
      for (let tx = tx0; tx < tx1; tx++) {
        jobs.push(
          this.tile(level, tx, ty).then((tile) => {
            // The overlap of this tile with the region, clipped to the level's own extent.
            const left = Math.max(x, tx * l.tileWidth);
            const right = Math.min(x + w, (tx + 1) * l.tileWidth, l.width);
            const top = Math.max(y, ty * l.tileHeight);
            const bottom = Math.min(y + h, (ty + 1) * l.tileHeight, l.height);
            for (let row = top; row < bottom; row++) {
              const src = ((row - ty * l.tileHeight) * l.tileWidth + (left - tx * l.tileWidth)) * 3;
              out.set(tile.subarray(src, src + (right - left) * 3), ((row - y) * w + (left - x)) * 3);
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
    await this.file.close();
  }
}
