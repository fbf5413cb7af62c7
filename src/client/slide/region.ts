// Tiles at a requested MPP: read the pyramid level nearest it (never coarser than needed, so the
// tile is only ever reduced, as OpenSlide's best-level-for-downsample does) and resample.
import sharp from 'sharp';
import type { Region, Slide } from './slide.js';

/** The coarsest level whose downsample does not exceed the wanted one (with a 1% slack for
 *  levels whose size was rounded). */
export function bestLevel(slide: Slide, downsample: number): number {
  let best = 0;
  slide.levels.forEach((l, i) => {
    if (l.downsample <= downsample * 1.01 && l.downsample > slide.levels[best].downsample) best = i;
  });
  return best;
}

export interface TileRead {
  /** RGB, size x size. */
  rgb: Buffer;
  size: number;
}

/** The level a tile of `extent` level-0 pixels at (x, y) is read from, and the square there. */
function tileRegion(slide: Slide, x: number, y: number, extent: number, size: number): { level: number; region: Region } {
  const level = bestLevel(slide, extent / size);
  const d = slide.levels[level].downsample;
  const side = Math.max(1, Math.round(extent / d));
  return { level, region: { x: Math.floor(x / d), y: Math.floor(y / d), w: side, h: side } };
}

/** Regions read only to be reduced, kept for the next read: a 448x448 region is 600 KB, and
 *  allocating one per tile made V8 collect its whole heap every ~15 tiles. */
const spare: Uint8Array[] = [];

/** The square of `extent` level-0 pixels at (x, y) as a `size` x `size` RGB tile. */
export async function readTile(slide: Slide, x: number, y: number, extent: number, size: number): Promise<TileRead> {
  const { level, region: r } = tileRegion(slide, x, y, extent, size);
  if (r.w === size) return { rgb: await resample(await slide.readRegion(level, r.x, r.y, r.w, r.h), r.w, size), size };
  const bytes = r.w * r.h * 3;
  const k = spare.findIndex((b) => b.length === bytes);
  const region = await slide.readRegion(level, r.x, r.y, r.w, r.h, k >= 0 ? spare.splice(k, 1)[0] : undefined);
  const rgb = await resample(region, r.w, size);
  if (spare.length < 32) spare.push(region);
  return { rgb, size };
}

/** Tells the slide which tiles (level-0 corners) will be read with readTile, in that order. */
export function expectTiles(slide: Slide, tiles: readonly { x: number; y: number }[], extent: number, size: number): void {
  if (!slide.expect || !tiles.length) return;
  const regions = tiles.map((t) => tileRegion(slide, t.x, t.y, extent, size));
  slide.expect(regions[0].level, regions.map((r) => r.region));
}

/** A side x side RGB square as size x size (a copy-free view when the sizes agree). */
export async function resample(region: Uint8Array, side: number, size: number): Promise<Buffer> {
  if (side === size) return Buffer.from(region.buffer, region.byteOffset, region.byteLength);
  if (side === 2 * size) return halve(region, size);
  return sharp(region, { raw: { width: side, height: side, channels: 3 } }).resize(size, size, { kernel: 'linear', fit: 'fill' }).raw().toBuffer();
}

/** 2x2 box average: 40x slides read for 20x models, the common case; in JavaScript it costs a
 *  third of a libvips pipeline (1.2 vs 3.6 CPU-ms for 448 -> 224, measured). */
function halve(region: Uint8Array, size: number): Buffer {
  const out = Buffer.allocUnsafe(size * size * 3); // every byte is written
  const row = size * 2 * 3;
  for (let y = 0; y < size; y++) {
    let a = y * 2 * row;
    let b = a + row;
    let o = y * size * 3;
    for (let x = 0; x < size; x++, a += 6, b += 6) {
      out[o++] = (region[a] + region[a + 3] + region[b] + region[b + 3] + 2) >> 2;
      out[o++] = (region[a + 1] + region[a + 4] + region[b + 1] + region[b + 4] + 2) >> 2;
      out[o++] = (region[a + 2] + region[a + 5] + region[b + 2] + region[b + 5] + 2) >> 2;
    }
  }
  return out;
}
