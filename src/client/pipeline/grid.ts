// The tile grid at the model's tile size and MPP, in level-0 pixels, and the tiles kept for their
// tissue fraction. Only whole tiles inside the slide, row-major, as CLAM and TRIDENT lay them.
import { TISSUE_MPP, type TissueMask } from './tissue.js';

export interface PlannedTile {
  /** patch_idx: the tile's index among the kept tiles. */
  idx: number;
  /** Level-0 pixel coordinates of the top-left corner. */
  x: number;
  y: number;
  tissue: number;
}

export interface TileGrid {
  /** Tile side in level-0 pixels. */
  extent: number;
  tiles: PlannedTile[];
}

/** Fraction of mask pixels (at TISSUE_MPP) whose centres fall in the level-0 square. */
export function tissueFraction(mask: TissueMask, mpp0: number, x: number, y: number, extent: number): number {
  const s = mpp0 / TISSUE_MPP;
  const x0 = Math.max(0, Math.round(x * s));
  const y0 = Math.max(0, Math.round(y * s));
  const x1 = Math.min(mask.width, Math.max(x0 + 1, Math.round((x + extent) * s)));
  const y1 = Math.min(mask.height, Math.max(y0 + 1, Math.round((y + extent) * s)));
  let tissue = 0;
  for (let my = y0; my < y1; my++) for (let mx = x0; mx < x1; mx++) tissue += mask.mask[my * mask.width + mx];
  return x1 > x0 && y1 > y0 ? tissue / ((x1 - x0) * (y1 - y0)) : 0;
}

/** A slide's level 0, the model's tiles and the tissue they need. */
export interface GridSpec {
  /** Level-0 size in pixels. */
  width: number;
  height: number;
  /** Level-0 MPP. */
  mpp0: number;
  /** The model's tile side in pixels, and its MPP. */
  tileSize: number;
  tileMpp: number;
  mask: TissueMask;
  /** The least tissue fraction of a kept tile (a tile with none is never kept). */
  minTissue: number;
}

export function tileGrid({ width, height, mpp0, tileSize, tileMpp, mask, minTissue }: GridSpec): TileGrid {
  const extent = Math.round((tileSize * tileMpp) / mpp0);
  const tiles: PlannedTile[] = [];
  for (let y = 0; y + extent <= height; y += extent) {
    for (let x = 0; x + extent <= width; x += extent) {
      const tissue = tissueFraction(mask, mpp0, x, y, extent);
      if (tissue >= minTissue && tissue > 0) tiles.push({ idx: tiles.length, x, y, tissue });
    }
  }
  return { extent, tiles };
}

/** How much coarser than the model's MPP level 0 may be before it is said: scanners' nominal
 *  magnifications vary by a few percent (0.2527 µm/px for 40x), which no one needs told. */
const UPSAMPLE_SLACK = 1.1;

/** A slide coarser than the model's MPP has its tiles upsampled from level 0 (20x for a 40x model,
 *  or a folder missing its finest level): done, as asked, but said in the summary, since the
 *  features are not the model's at its magnification. */
export function upsampleWarning(mpp0: number, tileMpp: number): string | null {
  if (mpp0 <= tileMpp * UPSAMPLE_SLACK) return null;
  return `warning: the slide's finest level is ${Number(mpp0.toPrecision(4))} µm/px, coarser than the model's ${tileMpp} µm/px: its tiles were upsampled ${Number((mpp0 / tileMpp).toPrecision(3))}x from it (is the slide's finest level missing, or the model meant for another magnification?)`;
}
