// One slide end to end: open it, find tissue at 8 MPP, lay the model's tile grid over the tissue,
// post the tiles, and write the outputs. Everything is resumable: the tissue mask is written
// first and reread on a rerun, and tile results come from the journal.
import { existsSync, mkdirSync } from 'node:fs';
import { basename, extname, join } from 'node:path';
import sharp from 'sharp';
import type { TileClient } from '../tile-client.js';
import { tissueGeoJson } from './geojson.js';
import { tileGrid } from './grid.js';
import { modelPlan, runTiles, writeModelOutputs, type InferTile, type Progress } from './inference.js';
import { Journal } from './journal.js';
import { writeFileAtomic } from './outputs.js';
import { heatmapPng, overlayPng } from './pictures.js';
import { expectTiles, readTile } from '../slide/region.js';
import { SlideError } from '../slide/slide.js';
import { openSlide } from '../slide/open.js';
import { TISSUE_MPP, detectTissue, readOverview, readTissueMask, type TissueMask } from './tissue.js';

export interface SlideJob {
  slide: string;
  model: string;
  outDir: string;
  client: TileClient;
  concurrency: number;
  minTissue: number;
  tissueModel: string;
  /** Level-0 MPP for slides whose metadata has none. */
  mpp?: number;
  heatmap?: string;
  /** Told the number of tiles to post (after resume) once the grid is known. */
  onPlan?: (total: number, done: number) => Progress;
}

export interface SlideResult {
  stem: string;
  tiles: number;
  files: string[];
}

export async function processSlide(job: SlideJob): Promise<SlideResult> {
  const stem = basename(job.slide, extname(job.slide));
  const slide = await openSlide(job.slide);
  try {
    const mpp0 = job.mpp ?? slide.mpp;
    if (!mpp0) throw new SlideError(`${job.slide}: the slide records no MPP; give it with --mpp`);
    const meta = await job.client.metadata(job.model);
    const plan = modelPlan(meta);
    const l0 = slide.levels[0];
    const overview = await readOverview(slide, mpp0);

    // Tissue: the mask PNG is the checkpoint of this stage.
    const tissueDir = join(job.outDir, 'tissue');
    mkdirSync(tissueDir, { recursive: true });
    const maskPath = join(tissueDir, `${stem}.png`);
    let mask: TissueMask;
    if (existsSync(maskPath)) mask = await readTissueMask(maskPath);
    else {
      mask = await detectTissue(overview, mpp0, job.client, job.tissueModel, stem);
      const scale = TISSUE_MPP / mpp0;
      writeFileAtomic(join(tissueDir, `${stem}.geojson`), JSON.stringify(tissueGeoJson(mask.mask, mask.width, mask.height, scale)));
      const grey = Buffer.from(mask.mask.map((v) => v * 255));
      writeFileAtomic(maskPath, await sharp(grey, { raw: { width: mask.width, height: mask.height, channels: 1 } }).png().toBuffer());
    }

    const { tile } = meta;
    const tileMpp = tile.mpp;
    if (tile.width !== tile.height) throw new SlideError(`model ${meta.model} takes ${tile.width}x${tile.height} tiles; slides are tiled in squares`);
    const grid = tileGrid(l0.width, l0.height, mpp0, tile.width, tileMpp, mask, job.minTissue);
    const tiles: InferTile[] = grid.tiles.map((t) => ({ ...t, image: async () => ({ rgb: (await readTile(slide, t.x, t.y, grid.extent, tile.width)).rgb }) }));
    const journalDir = join(job.outDir, '.journal');
    mkdirSync(journalDir, { recursive: true });
    const journal = Journal.open(join(journalDir, `${stem}.${meta.model}.jsonl`), { model: meta.model, sha256: meta.sha256, path: plan.path, extent: grid.extent, tiles: tiles.length, mpp0 });
    try {
      expectTiles(slide, grid.tiles.filter((t) => !journal.done.has(t.idx)), grid.extent, tile.width);
      const progress = job.onPlan?.(tiles.length, tiles.filter((t) => journal.done.has(t.idx)).length);
      await runTiles(job.client, plan, tiles, journal, { slideName: stem, width: tile.width, height: tile.height, resolution: tileMpp }, job.concurrency, progress);
      const attrs = { patch_size: tile.width, patch_size_level0: grid.extent, level0_mpp: mpp0, target_mpp: tileMpp, patch_level: 0 };
      const files = await writeModelOutputs(job.outDir, stem, meta, plan, tiles, journal, attrs);

      const scale = mpp0 / TISSUE_MPP;
      const thumbDir = join(job.outDir, 'thumbnails');
      mkdirSync(thumbDir, { recursive: true });
      const thumb = join(thumbDir, `${stem}.png`);
      writeFileAtomic(thumb, await overlayPng(overview, mask, grid.tiles, grid.extent, scale));
      files.push(maskPath, join(tissueDir, `${stem}.geojson`), thumb);
      if (job.heatmap) {
        const g = (meta.output_genes ?? []).indexOf(job.heatmap);
        if (!plan.prediction || g < 0) throw new SlideError(`--heatmap ${job.heatmap}: not an output gene of ${meta.model} (${(meta.output_genes ?? []).join(', ') || 'no predictions'})`);
        const values = grid.tiles.map((t) => journal.done.get(t.idx)!.output[g]);
        const dir = join(job.outDir, `heatmaps_${meta.model}`);
        mkdirSync(dir, { recursive: true });
        const path = join(dir, `${stem}_${job.heatmap}.png`);
        writeFileAtomic(path, await heatmapPng(overview, mask, grid.tiles, values, grid.extent, scale));
        files.push(path);
      }
      return { stem, tiles: tiles.length, files };
    } finally {
      journal.close();
    }
  } finally {
    await slide.close();
  }
}

