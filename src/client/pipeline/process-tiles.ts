// A folder of PNG tiles already cut at the model's size: coordinates from the file names
// (`..._x1024_y2048.png` or `..._1024_2048.png`) or from a CSV plan with `file,x,y` columns.
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { ModelMetadataBody, TileClient } from '../tile-client.js';
import { tileRequestBody, type MadeBody } from '../tile-body.js';
import { readPngHeader } from '../../tile/png-rules.js';
import { CodedError, errorLine, type CodesOf } from '../../lib/errors.js';
import { readHead } from '../../lib/read-head.js';
import {
  journalShape,
  runTiles,
  writeModelOutputs,
  type ModelPlan,
  type OnTileError,
  type Progress,
  type TileAt,
} from './inference.js';
import { Journal } from './journal.js';
import { makeDir } from './outputs.js';

export interface TilesJob {
  dir: string;
  model: ModelMetadataBody;
  plan: ModelPlan;
  outDir: string;
  client: TileClient;
  /** The PNG files as they are (image/png) when every --server takes them, else in the JSON. */
  pngBodies: boolean;
  concurrency: number;
  /** A CSV with a header naming `file`, `x`, `y` (further columns ignored). */
  tilePlan?: string;
  /** MPP the tiles were cut at (default the model's). */
  mpp?: number;
  onPlan?: (total: number, done: number) => Progress;
}

/** A tile file the run could not use, and why. */
export interface FailedTile {
  file: string;
  reason: string;
}

export class TilePlanError extends CodedError<CodesOf<'PLAN'>> {
  override name = 'TilePlanError';
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
  if (fi < 0 || xi < 0 || yi < 0)
    throw new TilePlanError('TILE_ERR_PLAN_HEADER', `${path}: the header must name file, x and y; it is "${header}"`);
  return lines.map((line, k) => {
    const cells = line.split(',').map((c) => c.trim());
    const x = Number(cells[xi]);
    const y = Number(cells[yi]);
    if (!Number.isInteger(x) || !Number.isInteger(y))
      throw new TilePlanError(
        'TILE_ERR_PLAN_COORDS',
        `${path}: line ${k + 2}: x and y must be integers, got "${cells[xi]}", "${cells[yi]}"`,
      );
    return { file: cells[fi], x, y };
  });
}

/** What `read` gives of the folder or plan at `path`; one that cannot be read (not there, not a
 *  folder, no permission) is the job's coded error, not Node's bare message. */
function readable<T>(path: string, read: () => T): T {
  try {
    return read();
  } catch (err) {
    throw new TilePlanError('TILE_ERR_PLAN_NO_TILES', `${path}: cannot be read: ${(err as Error).message}`);
  }
}

/** Posts a folder's tiles, each with its own size (from its header): a damaged tile file, or one
 *  the model cannot take (refused here or by the service with a 4xx: another size), is recorded
 *  with its reason and the others go on; the outputs hold the tiles that got through. */
export async function processTiles(
  job: TilesJob,
): Promise<{ stem: string; tiles: number; files: string[]; failed: FailedTile[] }> {
  const stem = basename(resolve(job.dir));
  const entries = job.tilePlan
    ? readPlan(
        readable(job.tilePlan, () => readFileSync(job.tilePlan!, 'utf8')),
        job.tilePlan,
      )
    : readable(job.dir, () => readdirSync(job.dir))
        .filter((f) => f.toLowerCase().endsWith('.png'))
        .sort()
        .map((file) => {
          const c = coordsFromName(file);
          if (!c)
            throw new TilePlanError(
              'TILE_ERR_PLAN_COORDS',
              `${join(job.dir, file)}: no coordinates in the name (expected x<N>_y<N> or <N>_<N>.png); give a --plan CSV`,
            );
          return { file, ...c };
        });
  if (!entries.length) throw new TilePlanError('TILE_ERR_PLAN_NO_TILES', `${job.dir}: no PNG tiles`);
  const { model: meta, plan } = job;
  const failed = new Map<number, FailedTile>();
  const tiles: TileAt[] = entries.map((e, idx) => ({ idx, x: e.x, y: e.y }));
  // Each file's IHDR (its first 33 bytes) now; the whole file when its tile is posted.
  const headers = entries.map((e, idx) => {
    try {
      return readPngHeader(readHead(join(job.dir, e.file), 33));
    } catch (err) {
      failed.set(idx, {
        file: join(job.dir, e.file),
        reason: errorLine(new TilePlanError('TILE_ERR_PLAN_NOT_PNG', `not a PNG tile: ${errorLine(err as Error)}`)),
      });
      return null;
    }
  });
  makeDir(join(job.outDir, '.journal'));
  const journal = Journal.open(
    join(job.outDir, '.journal', `${stem}.${meta.model}.jsonl`),
    { model: meta.model, sha256: meta.sha256, path: plan.path, files: entries.map((e) => e.file) },
    journalShape(meta, plan, tiles.length),
  );
  try {
    const todo = tiles.filter((t) => !journal.done.has(t.idx) && !failed.has(t.idx));
    const progress = job.onPlan?.(tiles.length - failed.size, tiles.length - failed.size - todo.length);
    const resolution = job.mpp ?? meta.tile.mpp;
    async function* bodies() {
      for (const tile of todo) {
        const png = readFileSync(join(job.dir, entries[tile.idx].file));
        const { width, height } = headers[tile.idx]!;
        const fields = { slide_name: stem, x: tile.x, y: tile.y, width, height, patch_idx: tile.idx, resolution };
        const body: MadeBody = job.pngBodies
          ? { type: 'image/png', bytes: png, fields }
          : { type: 'application/json', bytes: tileRequestBody(png, fields), fields };
        yield { tile, body };
      }
    }
    const onTileError: OnTileError = (tile, err) => {
      if (err.status === undefined || err.status >= 500) return 'stop';
      const detail = (err.body as { detail?: unknown } | undefined)?.detail;
      failed.set(tile.idx, {
        file: join(job.dir, entries[tile.idx].file),
        reason: `[${err.code}] ${err.status} from the service: ${detail === undefined ? err.message : JSON.stringify(detail)}`,
      });
      return 'skip';
    };
    await runTiles({
      client: job.client,
      plan,
      bodies: bodies(),
      journal,
      concurrency: job.concurrency,
      progress,
      onTileError,
    });
    const good = tiles.filter((t) => journal.done.has(t.idx));
    const files = good.length
      ? await writeModelOutputs({
          outDir: job.outDir,
          stem,
          model: meta,
          plan,
          tiles: good,
          journal,
          attrs: { patch_size: meta.tile.width, target_mpp: resolution },
        })
      : [];
    return { stem, tiles: good.length, files, failed: [...failed.values()] };
  } finally {
    journal.close();
  }
}
