// Tiles at a requested MPP: read the pyramid level nearest it (never coarser than needed, so the
// tile is only ever reduced, as OpenSlide's best-level-for-downsample does) and resample.
import sharp from 'sharp';
import type { Slide } from './slide.js';

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

/** The square of `extent` level-0 pixels at (x, y) as a `size` x `size` RGB tile. */
export async function readTile(slide: Slide, x: number, y: number, extent: number, size: number): Promise<TileRead> {
  const level = bestLevel(slide, extent / size);
  const d = slide.levels[level].downsample;
  const lx = Math.floor(x / d);
  const ly = Math.floor(y / d);
  const side = Math.max(1, Math.round(extent / d));
  const region = await slide.readRegion(level, lx, ly, side, side);
  return { rgb: await resample(region, side, size), size };
}

/** A side x side RGB square as size x size (a copy-free view when the sizes agree). */
export async function resample(region: Uint8Array, side: number, size: number): Promise<Buffer> {
  if (side === size) return Buffer.from(region.buffer, region.byteOffset, region.byteLength);
  return sharp(region, { raw: { width: side, height: side, channels: 3 } }).resize(size, size, { kernel: 'linear', fit: 'fill' }).raw().toBuffer();
}

/** PNG of an RGB tile with fast deflate: the service inflates it, nobody stores it. */
export function encodeTilePng(rgb: Buffer, width: number, height: number): Promise<Buffer> {
  return sharp(rgb, { raw: { width, height, channels: 3 } }).png({ compressionLevel: 1, adaptiveFiltering: false }).toBuffer();
}
