// Tiles at a requested MPP: read the pyramid level nearest it (never coarser than needed, so the
// tile is only ever reduced, as OpenSlide's best-level-for-downsample does) and resample.
import sharp from 'sharp';
import type { Region, Slide, SlideLevel } from './slide.js';

/** The coarsest level whose downsample does not exceed the wanted one (with a 1% slack for
 *  levels whose size was rounded). */
export function bestLevel(slide: { levels: SlideLevel[] }, downsample: number): number {
  let best = 0;
  slide.levels.forEach((l, i) => {
    if (l.downsample <= downsample * 1.01 && l.downsample > slide.levels[best].downsample) best = i;
  });
  return best;
}

/** The level a tile of `extent` level-0 pixels at (x, y) is read from, and the square there. */
export function tileRegion(
  slide: Pick<Slide, 'levels'>,
  x: number,
  y: number,
  extent: number,
  size: number,
): { level: number; region: Region } {
  const level = bestLevel(slide, extent / size);
  const d = slide.levels[level].downsample;
  const side = Math.max(1, Math.round(extent / d));
  return { level, region: { x: Math.floor(x / d), y: Math.floor(y / d), w: side, h: side } };
}

/** Writes row y of a tile into `out` at `at` (size * 3 bytes). */
export type RowWriter = (y: number, out: Uint8Array, at: number) => void;

/** Rows [y0, y0 + n) of a region, w * 3 bytes each, into `out` at `at`. */
export type RegionRows = (y0: number, n: number, out: Uint8Array, at: number) => void;

/** The rows of a side x side region resampled to size x size, written where the body wants them:
 *  copied when the sizes agree, a 2x2 box average for twice the size (40x slides for 20x models),
 *  else libvips' linear reduction of the whole region. */
export async function resampledRows(rows: RegionRows, side: number, size: number): Promise<RowWriter> {
  if (side === size) return (y, out, at) => rows(y, 1, out, at);
  if (side === 2 * size) {
    const pair = new Uint8Array(side * 6);
    return (y, out, at) => {
      rows(2 * y, 2, pair, 0);
      halveRow(pair, size, out, at);
    };
  }
  const region = new Uint8Array(side * side * 3);
  rows(0, side, region, 0);
  const small = await sharp(region, { raw: { width: side, height: side, channels: 3 } })
    .resize(size, size, { kernel: 'linear', fit: 'fill' })
    .raw()
    .toBuffer();
  return (y, out, at) => out.set(small.subarray(y * size * 3, (y + 1) * size * 3), at);
}

/** A whole region held in memory, as RegionRows. */
export const bufferRows =
  (rgb: Uint8Array, w: number): RegionRows =>
  (y0, n, out, at) =>
    out.set(rgb.subarray(y0 * w * 3, (y0 + n) * w * 3), at);

/** One output row from two region rows side by side in `pair` (2 * size pixels each): the 2x2
 *  box average rounded half up. Cheaper in JavaScript than a libvips pipeline per tile, and
 *  libvips' shrink rounds twice, so its pixels would differ. */
function halveRow(pair: Uint8Array, size: number, out: Uint8Array, at: number): void {
  const row = size * 6;
  for (let a = 0, b = row, o = at; a < row; a += 6, b += 6, o += 3) {
    out[o] = (pair[a] + pair[a + 3] + pair[b] + pair[b + 3] + 2) >> 2;
    out[o + 1] = (pair[a + 1] + pair[a + 4] + pair[b + 1] + pair[b + 4] + 2) >> 2;
    out[o + 2] = (pair[a + 2] + pair[a + 5] + pair[b + 2] + pair[b + 5] + 2) >> 2;
  }
}
