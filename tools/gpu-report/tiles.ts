// The report's tiles: distinct synthetic ones of the model's size, as PNG (the floor decodes them)
// and as the raw-body route's request (uint8 RGB, the fields in the query).
import type { Manifest } from '../../src/model-package/manifest.js';
import { tileQuery } from '../../src/client/tile-body.js';
import { benchTile, encodePng, rgbOf } from '../synthetic/tissue.js';
import type { BenchBody } from '../../bench/load.js';

export function reportTiles(manifest: Manifest, count: number): { pngs: Buffer[]; raw: BenchBody[] } {
  const { width, height, mpp } = manifest.tile;
  const pngs: Buffer[] = [];
  const raw: BenchBody[] = [];
  for (let i = 0; i < count; i++) {
    // Cellular texture at high resolution, a slide's tissue and glass at low.
    const tile = benchTile(3000, i, width, mpp < 2 && width === height);
    pngs.push(encodePng(tile));
    raw.push({
      type: 'application/octet-stream',
      body: rgbOf(tile),
      query: tileQuery({ slide_name: 'gpu-report', x: i * width, y: 0, width, height, patch_idx: i, resolution: mpp }),
    });
  }
  return { pngs, raw };
}
