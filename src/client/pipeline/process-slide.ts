// One slide end to end: check whose outputs these are, open it, find tissue at 8 MPP, lay the
// model's tile grid over the tissue, post the tiles (read and encoded on the reader pool), and
// write the outputs. Everything is resumable: a finished slide is skipped from its done record when
// its content and plan are the same, an output added since is made from the kept results, the
// tissue mask is written first and reread on a rerun, and tile results come from the journal.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import type { ModelMetadataBody, TileClient } from '../tile-client.js';
import type { CohortSlide } from './cohort.js';
import { tissueGeoJson } from './geojson.js';
import { tileGrid, upsampleWarning } from './grid.js';
import { identityOf, OutFolderError, planChanges, SlideRecords, type SlidePlan } from './identity.js';
import { journalShape, runTiles, writeModelOutputs, type ModelPlan, type Progress } from './inference.js';
import { Journal } from './journal.js';
import { makeDir, writeFileAtomic } from './outputs.js';
import { heatmapPng, overlayPng } from './pictures.js';
import type { ReaderPool } from './reader-pool.js';
import { tileBodies } from './tile-reader.js';
import { MAX_SLIDE_UM, SlideError } from '../slide/slide.js';
import { openSlide, unreadable } from '../slide/open.js';
import { TISSUE_MPP, detectTissue, overviewWarning, readOverview, readTissueMask, type TissueMask } from './tissue.js';

/** What every slide of a run shares. */
export interface SlideRun {
  model: ModelMetadataBody;
  plan: ModelPlan;
  outDir: string;
  client: TileClient;
  /** Raw pixels when every --server takes them for the model, else the contract's JSON. */
  bodyType: 'application/json' | 'application/octet-stream';
  pool: ReaderPool;
  concurrency: number;
  minTissue: number;
  tissueModel: string;
  tissueSha256: string;
  /** A finished slide asked again under another plan fails instead of being redone. */
  noOverwrite: boolean;
  /** Level-0 MPP for slides (--mpp); a manifest's mpp column wins for its slide. */
  mpp?: number;
  heatmap?: string;
  /** Told the number of tiles to post (after resume) once the grid is known. */
  onPlan?: (total: number, done: number) => Progress;
}

export interface SlideResult {
  stem: string;
  tiles: number;
  files: string[];
  /** Finished by an earlier run: nothing was read. */
  skipped: boolean;
  /** The earlier run's seconds, for a skipped slide. */
  seconds?: number;
  /** Done, but a person should look (the summary's reason). */
  warnings: string[];
}

/** The plan a run asks of a slide, its MPP null when it is to come from the slide. */
function askedPlan(run: SlideRun, entry: CohortSlide): SlidePlan {
  const { model: meta, plan } = run;
  const outputs = [
    ...(plan.embedding ? ['features'] : []),
    ...(plan.prediction ? ['predictions'] : []),
    'tissue',
    'thumbnail',
    ...(run.heatmap ? [`heatmap ${run.heatmap}`] : []),
  ];
  const mppSource = entry.mpp !== undefined ? 'manifest' : run.mpp !== undefined ? '--mpp' : 'slide';
  return {
    model: meta.model,
    version: meta.version,
    sha256: meta.sha256,
    tile: meta.tile.width,
    tileMpp: meta.tile.mpp,
    minTissue: run.minTissue,
    tissueModel: run.tissueModel,
    tissueSha256: run.tissueSha256,
    mpp: entry.mpp ?? run.mpp ?? null,
    mppSource,
    outputs,
  };
}

export async function processSlide(run: SlideRun, entry: CohortSlide): Promise<SlideResult> {
  const { stem, path } = entry;
  const meta = run.model;
  const id = identityOf(path);
  // A remote slide's first range request: its identity (URL, ETag, size; a DICOM series' UID),
  // then its reader's.
  const source = id.bytes ? await id.bytes() : null;
  const problem = source ? null : unreadable(path);
  if (problem) throw new SlideError('TILE_ERR_SLIDE_MISSING', `${entry.label}: ${problem}`);
  const journalDir = join(run.outDir, '.journal');
  const tissueDir = join(run.outDir, 'tissue');
  makeDir(journalDir);
  makeDir(tissueDir);
  const maskPath = join(tissueDir, `${stem}.png`);
  const geojsonPath = join(tissueDir, `${stem}.geojson`);
  const journalPath = join(journalDir, `${stem}.${meta.model}.jsonl`);
  const records = new SlideRecords(journalDir, stem, meta.model);
  const sha256 = await records.claim(id, [maskPath, geojsonPath, journalPath]);
  const asked = askedPlan(run, entry);
  const finished = records.done(sha256);
  if (finished) {
    const changes = planChanges(finished.plan, asked);
    const added = asked.outputs.filter((o) => !finished.plan.outputs.includes(o));
    if (!changes.length && !added.length)
      return {
        stem,
        tiles: finished.tiles,
        files: finished.files,
        skipped: true,
        seconds: finished.seconds,
        warnings: [],
      };
    if (changes.length && run.noOverwrite)
      throw new OutFolderError(
        'TILE_ERR_COHORT_PLAN_CHANGED',
        `${entry.label}: finished in this --out under another plan (${changes.join('; ')}); not redone (--no-overwrite)`,
      );
    // Not done as now asked until it is: a kill from here on leaves no record to skip it by.
    records.undone();
    // What the old plan wrote goes with its record, the tissue mask kept (a checkpoint the new plan
    // reuses when its tissue plan is the same): the new plan need not write it all again, and an
    // old --heatmap stayed beside the new features (an attack session).
    if (changes.length)
      for (const file of finished.files) if (file !== maskPath && file !== geojsonPath) rmSync(file, { force: true });
  }
  const started = performance.now();

  const slide = await openSlide(path, source ?? undefined);
  try {
    const mpp0 = asked.mpp ?? slide.mpp;
    if (!mpp0)
      throw new SlideError(
        slide.mppError ? (slide.mppErrorCode ?? 'TILE_ERR_SLIDE_MPP_RANGE') : 'TILE_ERR_SLIDE_NO_MPP',
        slide.mppError ?? `${entry.label}: the slide records no MPP; give it with --mpp`,
      );
    const l0 = slide.levels[0];
    if (l0.width * mpp0 > MAX_SLIDE_UM || l0.height * mpp0 > MAX_SLIDE_UM) {
      throw new SlideError(
        'TILE_ERR_SLIDE_TOO_LARGE',
        `${entry.label}: ${l0.width}x${l0.height} pixels at ${mpp0} µm/px is ${((l0.width * mpp0) / 1000).toFixed(0)} x ${((l0.height * mpp0) / 1000).toFixed(0)} mm, larger than any glass slide; is the MPP right? (--mpp)`,
      );
    }
    // Given MPP wins over the slide's own (a scanner's wrong metadata), but is said where they differ.
    const overridden =
      asked.mpp !== null && slide.mpp && Math.abs(asked.mpp / slide.mpp - 1) > 0.1
        ? `warning: the ${asked.mppSource === 'manifest' ? "manifest's mpp" : '--mpp'} ${asked.mpp} µm/px was used over the ${slide.mpp} µm/px the slide records`
        : null;
    const warnings = [
      ...(slide.warnings ?? []),
      overviewWarning(slide, mpp0),
      upsampleWarning(mpp0, meta.tile.mpp),
      overridden,
    ].filter((w) => w !== null);
    const overview = await readOverview(slide, mpp0, (job, into) => run.pool.decode({ job, into }));

    // Tissue: the mask PNG is the checkpoint of this stage.
    const tissue = { slide: sha256, model: run.tissueModel, sha256: run.tissueSha256, mpp: mpp0 };
    let mask: TissueMask;
    if (records.tissueMatches(maskPath, tissue)) mask = await readTissueMask(maskPath);
    else {
      mask = await detectTissue({ overview, mpp0, client: run.client, model: run.tissueModel, slideName: stem });
      const scale = TISSUE_MPP / mpp0;
      writeFileAtomic(geojsonPath, JSON.stringify(tissueGeoJson(mask, scale)));
      const grey = Buffer.from(mask.mask.map((v) => v * 255));
      writeFileAtomic(
        maskPath,
        await sharp(grey, { raw: { width: mask.width, height: mask.height, channels: 1 } })
          .png()
          .toBuffer(),
      );
      records.markTissue(tissue);
    }

    const { tile } = meta;
    const tileMpp = tile.mpp;
    const grid = tileGrid({
      width: l0.width,
      height: l0.height,
      mpp0,
      tileSize: tile.width,
      tileMpp,
      mask,
      minTissue: run.minTissue,
    });
    if (!grid.tiles.length)
      throw new SlideError(
        'TILE_ERR_SLIDE_NO_TISSUE',
        `${entry.label}: no tissue: no ${tile.width} px tile at ${tileMpp} µm/px has a tissue fraction of ${run.minTissue} or more (--min-tissue)`,
      );
    const journalPlan = {
      model: meta.model,
      sha256: meta.sha256,
      path: run.plan.path,
      extent: grid.extent,
      tiles: grid.tiles.length,
      mpp0,
      slide: sha256,
      minTissue: run.minTissue,
      tissue: run.tissueSha256,
    };
    const journal = Journal.open(journalPath, journalPlan, journalShape(meta, run.plan, grid.tiles.length));
    try {
      const todo = grid.tiles.filter((t) => !journal.done.has(t.idx));
      const progress = run.onPlan?.(grid.tiles.length, grid.tiles.length - todo.length);
      const fields = (t: (typeof todo)[number]) => ({
        slide_name: stem,
        x: t.x,
        y: t.y,
        width: tile.width,
        height: tile.height,
        patch_idx: t.idx,
        tissue_ratio: t.tissue,
        resolution: tileMpp,
      });
      await runTiles({
        client: run.client,
        plan: run.plan,
        bodies: tileBodies({
          pool: run.pool,
          type: run.bodyType,
          slide,
          tiles: todo,
          extent: grid.extent,
          size: tile.width,
          fields,
        }),
        journal,
        concurrency: run.concurrency,
        progress,
      });
      const attrs = {
        patch_size: tile.width,
        patch_size_level0: grid.extent,
        level0_mpp: mpp0,
        target_mpp: tileMpp,
        patch_level: 0,
      };
      const files = await writeModelOutputs({
        outDir: run.outDir,
        stem,
        model: meta,
        plan: run.plan,
        tiles: grid.tiles,
        journal,
        attrs,
      });

      const scale = mpp0 / TISSUE_MPP;
      const thumbDir = join(run.outDir, 'thumbnails');
      makeDir(thumbDir);
      const thumb = join(thumbDir, `${stem}.png`);
      const picture = { overview, mask, tiles: grid.tiles, extent: grid.extent, scale };
      writeFileAtomic(thumb, await overlayPng(picture));
      files.push(maskPath, geojsonPath, thumb);
      if (run.heatmap) {
        const g = meta.output_genes!.indexOf(run.heatmap); // checked before the run
        const values = grid.tiles.map((t) => journal.done.get(t.idx)!.output[g]);
        const dir = join(run.outDir, `heatmaps_${meta.model}`);
        makeDir(dir);
        const heatmap = join(dir, `${stem}_${run.heatmap}.png`);
        writeFileAtomic(heatmap, await heatmapPng(picture, values));
        files.push(heatmap);
      }
      const seconds = (performance.now() - started) / 1000;
      records.markDone({ sha256, plan: { ...asked, mpp: mpp0 }, tiles: grid.tiles.length, seconds, files });
      return { stem, tiles: grid.tiles.length, files, skipped: false, warnings };
    } finally {
      journal.close();
    }
  } finally {
    await slide.close();
  }
}
