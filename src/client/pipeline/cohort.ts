// A cohort: the slides a run is given (paths, or CSV manifests in TRIDENT's convention: a `wsi`
// column of paths relative to the CSV, an optional `mpp` column), the shard of it this process
// runs, and the summary it writes as slides finish.
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, extname, resolve } from 'node:path';
import { parse } from 'csv-parse/sync';
import { stringify } from 'csv-stringify/sync';
import { writeFileAtomic } from './outputs.js';
import { expandStudy } from '../slide/dicom/open-dicom.js';
import { parseDicomWebUrl } from '../slide/dicom/dicomweb.js';
import { isRemote } from '../slide/remote/open-source.js';
import { mppInRange, MPP_RANGE } from '../slide/slide.js';
import { UsageError } from '../usage-error.js';

export interface CohortSlide {
  /** The slide as the user named it (argument or manifest cell): the summary's `slide`. */
  label: string;
  /** Where it is (a manifest's paths are relative to the manifest). */
  path: string;
  /** Outputs are named after it: the file name less its extension. */
  stem: string;
  /** The manifest's MPP for this slide, if any. */
  mpp?: number;
  /** Where it was named: `cohort.csv line 3`, or `the command line`. */
  from: string;
}

/** A DICOMweb series is named by its UID, a URL by its path's file name (no query string), a file
 *  by its name; less the extension. */
export const stemOf = (path: string) => {
  const series = parseDicomWebUrl(path)?.series;
  if (series) return series;
  const name = isRemote(path) ? decodeURIComponent(new URL(path).pathname) : path;
  return basename(name, extname(name));
};

/** A manifest cell or an argument: a URL as it is, else a path from `dir`. */
const locate = (dir: string, slide: string) => (/^[a-z][a-z0-9+.-]*:\/\//i.test(slide) ? slide : resolve(dir, slide));

function readManifest(csv: string): CohortSlide[] {
  let rows: Record<string, string>[];
  try {
    rows = parse(readFileSync(csv), {
      columns: (header: string[]) => header.map((h) => h.trim().toLowerCase()),
      bom: true,
      skip_empty_lines: true,
      trim: true,
    });
  } catch (err) {
    throw new UsageError('TILE_ERR_COHORT_MANIFEST', `${csv}: ${(err as Error).message}`);
  }
  if (!rows.length) return [];
  if (!('wsi' in rows[0]))
    throw new UsageError(
      'TILE_ERR_COHORT_MANIFEST',
      `${csv}: no "wsi" column (TRIDENT's manifest: a wsi column of slide paths relative to the CSV, optionally mpp)`,
    );
  return rows.map((row, k) => {
    if (!row.wsi) throw new UsageError('TILE_ERR_COHORT_MANIFEST', `${csv}: line ${k + 2}: the wsi cell is empty`);
    const slide: CohortSlide = {
      label: row.wsi,
      path: locate(dirname(csv), row.wsi),
      stem: stemOf(row.wsi),
      from: `${csv} line ${k + 2}`,
    };
    if (row.mpp) {
      const mpp = Number(row.mpp);
      if (!mppInRange(mpp))
        throw new UsageError(
          'TILE_ERR_COHORT_MANIFEST',
          `${csv}: line ${k + 2}: mpp "${row.mpp}" is not a slide's microns per pixel (${MPP_RANGE[0]} to ${MPP_RANGE[1]})`,
        );
      slide.mpp = mpp;
    }
    return slide;
  });
}

/** The slides named by the inputs, in order; a CSV input is a manifest. A slide named twice, and
 *  two slides whose outputs would have the same name, are refused here, before any work. */
export function readCohort(inputs: string[]): CohortSlide[] {
  const slides: CohortSlide[] = [];
  const seen = new Map<string, CohortSlide>();
  for (const [i, input] of inputs.entries()) {
    const found =
      extname(input).toLowerCase() === '.csv'
        ? readManifest(input)
        : [
            {
              label: input,
              path: locate('.', input),
              stem: stemOf(input),
              from: `input ${i + 1} on the command line ("${input}")`,
            },
          ];
    for (const s of found) {
      const first = seen.get(s.path);
      if (first)
        throw new UsageError(
          'TILE_ERR_COHORT_DUPLICATE',
          `${s.path} is named twice: ${first.from}${first.mpp === undefined ? '' : ` (mpp ${first.mpp})`} and ${s.from}${s.mpp === undefined ? '' : ` (mpp ${s.mpp})`}; keep one`,
        );
      seen.set(s.path, s);
      slides.push(s);
    }
  }
  const byStem = new Map<string, CohortSlide[]>();
  for (const s of slides) byStem.set(s.stem, [...(byStem.get(s.stem) ?? []), s]);
  const clashes = [...byStem.values()].filter((group) => group.length > 1);
  if (clashes.length) {
    const list = clashes
      .map((group) => `${group.map((s) => s.label).join(' and ')} (both "${group[0].stem}")`)
      .join('; ');
    throw new UsageError(
      'TILE_ERR_COHORT_NAME_CLASH',
      `slides with the same file name would write the same outputs: ${list}. Rename them, or run them into different --out folders`,
    );
  }
  return slides;
}

/** The cohort with each DICOMweb study URL replaced by its slide series (modality SM), named by
 *  their UIDs; a study whose server cannot say stays as it is, and fails as a slide. */
export async function expandStudies(slides: CohortSlide[]): Promise<CohortSlide[]> {
  const expanded = await Promise.all(
    slides.map(async (s) => {
      const url = parseDicomWebUrl(s.path);
      if (!url || url.series) return [s];
      const series = await expandStudy(s.path).catch(() => [s.path]);
      return series.map((path) => (path === s.path ? s : { ...s, label: path, path, stem: stemOf(path) }));
    }),
  );
  return expanded.flat();
}

export interface Shard {
  index: number;
  count: number;
  /** Where it came from, for the log. */
  from: string;
}

const SHARD = /^(\d+)\/(\d+)$/;

/** --shard INDEX/COUNT, else a Slurm job array's task (SLURM_ARRAY_TASK_ID less
 *  SLURM_ARRAY_TASK_MIN, over its step, of SLURM_ARRAY_TASK_COUNT), else a Kubernetes Indexed
 *  Job's JOB_COMPLETION_INDEX of --shards COUNT; null for a whole cohort. */
export function shardOf(
  option: string | undefined,
  shards: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Shard | null {
  const check = (index: number, count: number, from: string): Shard => {
    if (!Number.isInteger(index) || !Number.isInteger(count) || count < 1 || index < 0 || index >= count)
      throw new UsageError('TILE_ERR_COHORT_SHARD', `${from}: shard ${index} of ${count} (INDEX from 0 to COUNT-1)`);
    return { index, count, from };
  };
  if (option !== undefined) {
    const m = SHARD.exec(option);
    if (!m) throw new UsageError('TILE_ERR_COHORT_SHARD', `--shard ${option}: expected INDEX/COUNT, e.g. 0/4`);
    return check(Number(m[1]), Number(m[2]), `--shard ${option}`);
  }
  if (env.SLURM_ARRAY_TASK_ID !== undefined && env.SLURM_ARRAY_TASK_COUNT !== undefined) {
    const id = Number(env.SLURM_ARRAY_TASK_ID);
    const min = Number(env.SLURM_ARRAY_TASK_MIN ?? 0);
    const step = Number(env.SLURM_ARRAY_TASK_STEP ?? 1) || 1;
    return check(
      (id - min) / step,
      Number(env.SLURM_ARRAY_TASK_COUNT),
      `Slurm array task ${id} (min ${min}, step ${step}, count ${env.SLURM_ARRAY_TASK_COUNT})`,
    );
  }
  if (env.JOB_COMPLETION_INDEX !== undefined) {
    if (shards === undefined)
      throw new UsageError(
        'TILE_ERR_COHORT_SHARD',
        `JOB_COMPLETION_INDEX is ${env.JOB_COMPLETION_INDEX} (a Kubernetes Indexed Job): give the number of completions with --shards COUNT`,
      );
    return check(
      Number(env.JOB_COMPLETION_INDEX),
      Number(shards),
      `Kubernetes JOB_COMPLETION_INDEX ${env.JOB_COMPLETION_INDEX} of --shards ${shards}`,
    );
  }
  if (shards !== undefined)
    throw new UsageError(
      'TILE_ERR_COHORT_SHARD',
      '--shards COUNT takes its index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job); elsewhere give --shard INDEX/COUNT',
    );
  return null;
}

/** Slide k of the cohort (in argument and manifest order) belongs to shard k mod COUNT: every
 *  shard reads the same list, so together they run each slide once. */
export const inShard = <T>(slides: T[], shard: Shard | null): T[] =>
  shard ? slides.filter((_, k) => k % shard.count === shard.index) : slides;

export const summaryName = (shard: Shard | null) =>
  shard ? `summary.${shard.index}-of-${shard.count}.csv` : 'summary.csv';

export interface SummaryRow {
  slide: string;
  status: 'done' | 'failed';
  tiles: number;
  seconds: number;
  reason: string;
}

const COLUMNS = ['slide', 'status', 'tiles', 'seconds', 'reason'];

/** OUT/summary.csv: a row per slide (and per tile file that failed), in cohort order, rewritten
 *  whole (through a temporary file) as each one finishes. Rows an earlier run left for slides
 *  this run does not name are kept after this run's. Cells a spreadsheet would take for a formula
 *  (starting =, +, -, @, tab or CR: a slide named so) are written with a ' in front (OWASP's
 *  advice on CSV injection). */
export class Summary {
  private readonly rows = new Map<string, { order: number; row: SummaryRow | Record<string, string>; now: boolean }>();

  constructor(
    readonly path: string,
    private readonly order: (label: string) => number,
  ) {
    if (!existsSync(path)) return;
    try {
      const earlier = parse(readFileSync(path), { columns: true, skip_empty_lines: true }) as Record<string, string>[];
      // Keyed by the slide as this run names it: without the ' a neutralised cell was given.
      const slideOf = (cell: string) => (/^'[=+\-@\t\r]/.test(cell) ? cell.slice(1) : cell);
      earlier.forEach((row, k) =>
        this.rows.set(slideOf(row.slide), {
          order: Number.MAX_SAFE_INTEGER - earlier.length + k,
          row: { ...row, slide: slideOf(row.slide) },
          now: false,
        }),
      );
    } catch {
      // Not a summary this command wrote: replaced by this run's.
    }
  }

  /** `under`: the label of the slide or folder a row belongs to (a failed tile file's folder). */
  record(row: SummaryRow, under = row.slide): void {
    this.rows.set(row.slide, {
      order: this.order(under),
      row: { ...row, seconds: row.seconds.toFixed(1) } as never,
      now: true,
    });
    const sorted = [...this.rows.values()]
      .sort((a, b) => a.order - b.order || (a.row.slide < b.row.slide ? -1 : 1))
      .map((r) => r.row);
    writeFileAtomic(this.path, stringify(sorted, { header: true, columns: COLUMNS, escape_formulas: true }));
  }

  /** This run's failures. */
  get failed(): number {
    return [...this.rows.values()].filter((r) => r.now && r.row.status === 'failed').length;
  }
}
