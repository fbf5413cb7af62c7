// A folder of PNG tiles already cut at the model's size: coordinates from the file names
// (`..._x1024_y2048.png` or `..._1024_2048.png`) or from a CSV plan with `file,x,y` columns.
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { TileClient } from '../tile-client.js';
import { readPngHeader, type PngHeader } from '../../tile/png-rules.js';
import { modelPlan, runTiles, writeModelOutputs, type InferTile, type Progress } from './inference.js';
import { Journal } from './journal.js';

export interface TilesJob {
  dir: string;
  model: string;
  outDir: string;
  client: TileClient;
  concurrency: number;
  /** A CSV with a header naming `file`, `x`, `y` (further columns ignored). */
  plan?: string;
  /** MPP the tiles were cut at (default the model's). */
  mpp?: number;
  onPlan?: (total: number, done: number) => Progress;
}

export class TilePlanError extends Error {
  readonly code = 'TILE_PLAN';
}

/** x and y from a file name: `x123_y456` or the last two numbers before `.png`. */
export function coordsFromName(name: string): { x: number; y: number } | null {
  const m = /x(\d+)[_-]y(\d+)/i.exec(name) ?? /(\d+)[_-](\d+)\.png$/i.exec(name);
  return m ? { x: Number(m[1]), y: Number(m[2]) } : null;
}

export function readPlan(csv: string, path: string): { file: string; x: number; y: number }[] {
  const [header, ...lines] = csv.split(/\r?\n/).filter((l) => l.trim());
  const cols = header.split(',').map((c) => c.trim().toLowerCase());
  const [fi, xi, yi] = ['file', 'x', 'y'].map((c) => cols.indexOf(c));
  if (fi < 0 || xi < 0 || yi < 0) throw new TilePlanError(`${path}: the header must name file, x and y; it is "${header}"`);
  return lines.map((line, k) => {
    const cells = line.split(',').map((c) => c.trim());
    const x = Number(cells[xi]);
    const y = Number(cells[yi]);
    if (!Number.isInteger(x) || !Number.isInteger(y)) throw new TilePlanError(`${path}: line ${k + 2}: x and y must be integers, got "${cells[xi]}", "${cells[yi]}"`);
    return { file: cells[fi], x, y };
  });
}

export async function processTiles(job: TilesJob): Promise<{ stem: string; tiles: number; files: string[] }> {
  const stem = basename(resolve(job.dir));
  const entries = job.plan
    ? readPlan(readFileSync(job.plan, 'utf8'), job.plan)
    : readdirSync(job.dir)
        .filter((f) => f.toLowerCase().endsWith('.png'))
        .sort()
        .map((file) => {
          const c = coordsFromName(file);
          if (!c) throw new TilePlanError(`${join(job.dir, file)}: no coordinates in the name (expected x<N>_y<N> or <N>_<N>.png); give a --plan CSV`);
          return { file, ...c };
        });
  if (!entries.length) throw new TilePlanError(`${job.dir}: no PNG tiles`);
  const meta = await job.client.metadata(job.model);
  const plan = modelPlan(meta);
  const tiles: InferTile[] = entries.map((e, idx) => ({ idx, x: e.x, y: e.y, image: async () => ({ png: readFileSync(join(job.dir, e.file)) }) }));
  let first: PngHeader;
  try {
    first = readPngHeader(readFileSync(join(job.dir, entries[0].file)));
  } catch (err) {
    throw new TilePlanError(`${join(job.dir, entries[0].file)}: not a PNG tile (${(err as Error).message})`);
  }
  mkdirSync(join(job.outDir, '.journal'), { recursive: true });
  const journal = Journal.open(join(job.outDir, '.journal', `${stem}.${meta.model}.jsonl`), { model: meta.model, sha256: meta.sha256, path: plan.path, files: entries.map((e) => e.file) });
  try {
    const progress = job.onPlan?.(tiles.length, journal.done.size);
    const resolution = job.mpp ?? meta.tile.mpp;
    await runTiles(job.client, plan, tiles, journal, { slideName: stem, width: first.width, height: first.height, resolution }, job.concurrency, progress);
    const files = await writeModelOutputs(job.outDir, stem, meta, plan, tiles, journal, { patch_size: first.width, target_mpp: resolution });
    return { stem, tiles: tiles.length, files };
  } finally {
    journal.close();
  }
}
