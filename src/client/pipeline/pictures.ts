// Pictures a person looks at, drawn on the 8-MPP overview: the tissue outline and the tile grid,
// and a heatmap of one output (a gene's predicted expression) over the tissue.
import sharp from 'sharp';
import type { PlannedTile } from './grid.js';
import type { Overview, TissueMask } from './tissue.js';

const OUTLINE = [0, 170, 60];
const GRID = [40, 90, 220];

function paint(rgb: Buffer, i: number, colour: number[], alpha = 1): void {
  for (let c = 0; c < 3; c++) rgb[i * 3 + c] = Math.round(rgb[i * 3 + c] * (1 - alpha) + colour[c] * alpha);
}

const png = (rgb: Buffer, width: number, height: number) =>
  sharp(rgb, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();

/** Tissue pixels with a non-tissue 4-neighbour. */
function outline(mask: TissueMask, rgb: Buffer): void {
  const { width, height } = mask;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = y * width + x;
      if (!mask.mask[i]) continue;
      const edge =
        x === 0 ||
        y === 0 ||
        x === width - 1 ||
        y === height - 1 ||
        !mask.mask[i - 1] ||
        !mask.mask[i + 1] ||
        !mask.mask[i - width] ||
        !mask.mask[i + width];
      if (edge) paint(rgb, i, OUTLINE);
    }
  }
}

/** A tile's square on the overview, in overview pixels. */
function square(t: PlannedTile, scale: number, extent: number) {
  return {
    x0: Math.round(t.x * scale),
    y0: Math.round(t.y * scale),
    x1: Math.round((t.x + extent) * scale),
    y1: Math.round((t.y + extent) * scale),
  };
}

/** What a picture is drawn from: the overview, its tissue mask and the kept tiles. */
export interface SlidePicture {
  overview: Overview;
  mask: TissueMask;
  tiles: PlannedTile[];
  /** Tile side in level-0 pixels. */
  extent: number;
  /** Overview pixels per level-0 pixel. */
  scale: number;
}

/** The tile grid's squares and the tissue outline on the overview. */
export function overlayPng({ overview, mask, tiles, extent, scale }: SlidePicture): Promise<Buffer> {
  const rgb = Buffer.from(overview.rgb);
  const { width, height } = overview;
  for (const t of tiles) {
    const { x0, y0, x1, y1 } = square(t, scale, extent);
    for (let x = x0; x <= x1 && x < width; x++)
      for (const y of [y0, y1]) if (y < height) paint(rgb, y * width + x, GRID, 0.7);
    for (let y = y0; y <= y1 && y < height; y++)
      for (const x of [x0, x1]) if (x < width) paint(rgb, y * width + x, GRID, 0.7);
  }
  outline(mask, rgb);
  return png(rgb, width, height);
}

/** Viridis-like ramp from dark blue (low) through green to yellow (high). */
function ramp(t: number): number[] {
  const stops = [
    [68, 1, 84],
    [59, 82, 139],
    [33, 145, 140],
    [94, 201, 98],
    [253, 231, 37],
  ];
  const p = Math.min(0.9999, Math.max(0, t)) * (stops.length - 1);
  const k = Math.floor(p);
  const f = p - k;
  return stops[k].map((v, c) => v + (stops[k + 1][c] - v) * f);
}

/** Each tile's square filled with its value on a min-max ramp, half transparent, plus the outline. */
export function heatmapPng(
  { overview, mask, tiles, extent, scale }: SlidePicture,
  /** One per tile, in the tiles' order. */
  values: number[],
): Promise<Buffer> {
  const rgb = Buffer.from(overview.rgb);
  const { width, height } = overview;
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  tiles.forEach((t, k) => {
    const colour = ramp(hi > lo ? (values[k] - lo) / (hi - lo) : 0.5);
    const { x0, y0, x1, y1 } = square(t, scale, extent);
    for (let y = y0; y < Math.min(y1, height); y++)
      for (let x = x0; x < Math.min(x1, width); x++) paint(rgb, y * width + x, colour, 0.6);
  });
  outline(mask, rgb);
  return png(rgb, width, height);
}
