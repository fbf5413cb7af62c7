// The report's tiles: distinct synthetic ones of the model's size, as PNG (the floor decodes them)
// and as the raw-body route's request (uint8 RGB, the fields in the query).
import type { Manifest } from '../../src/model-package/manifest.js';
import { tileQuery } from '../../src/client/tile-body.js';
import { cellularTile, encodePng, slideTile, type SyntheticTile } from '../synthetic/tissue.js';
import type { BenchBody } from '../../bench/load.js';

export function reportTiles(manifest: Manifest, count: number): { pngs: Buffer[]; raw: BenchBody[] } {
  const { width, height, mpp } = manifest.tile;
  const pngs: Buffer[] = [];
  const raw: BenchBody[] = [];
  for (let i = 0; i < count; i++) {
    // Cellular texture at high resolution, a slide's tissue and glass at low.
    const tile: SyntheticTile =
      mpp < 2 && width === height
        ? cellularTile(3000 + i, width)
        : slideTile({
            size: width,
            seed: 3000 + i,
            stain: i % 3 ? 'he' : 'ihc',
            tissue: 0.3 + (i % 5) * 0.1,
            pale: 0.4,
            fat: 0.2,
            dust: 20,
          });
    const rgb = Buffer.alloc(width * height * 3);
    for (let p = 0; p < width * height; p++) tile.rgba.copy(rgb, p * 3, p * 4, p * 4 + 3);
    pngs.push(encodePng(tile));
    raw.push({
      type: 'application/octet-stream',
      body: rgb,
      query: tileQuery({ slide_name: 'gpu-report', x: i * width, y: 0, width, height, patch_idx: i, resolution: mpp }),
    });
  }
  return { pngs, raw };
}
