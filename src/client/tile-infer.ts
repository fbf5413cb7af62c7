#!/usr/bin/env node
// tile-infer: whole slides, cohorts of them, or folders of tiles through the tile service.
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { TileClient } from './tile-client.js';
import { errorLine } from '../lib/errors.js';
import {
  expandStudies,
  inShard,
  readCohort,
  shardOf,
  Summary,
  summaryName,
  type CohortSlide,
} from './pipeline/cohort.js';
import { modelPlan } from './pipeline/inference.js';
import type { SlideRun } from './pipeline/process-slide.js';
import { defaultSlidesInFlight, recordFailure, runCohort } from './pipeline/run-cohort.js';
import { processTiles } from './pipeline/process-tiles.js';
import { lockOutput } from './pipeline/out-lock.js';
import { makeDir } from './pipeline/outputs.js';
import { ReaderPool } from './pipeline/reader-pool.js';
import { CohortProgress } from './progress.js';
import { mppInRange, MPP_RANGE } from './slide/slide.js';
import { UsageError } from './usage-error.js';

const CORES = availableParallelism();
/** Reader threads: each is a V8 isolate with its decoders' buffers, and 100,000 of them took 12 GB
 *  before the process died (an attack session); more than a few per core gain nothing. */
const MAX_THREADS = 4 * CORES;
const SLIDES_IN_FLIGHT = defaultSlidesInFlight();

const HELP = `Usage:
  tile-infer slide SLIDE|MANIFEST.csv... --model MODEL --out DIR [options]
  tile-infer tiles DIR... --model MODEL --out DIR [--plan PLAN.csv] [options]

slide: for each slide, finds tissue at 8 MPP with the tissue model, lays MODEL's tile grid (tile
size and MPP from /api/metadata/MODEL) over it, posts the tiles with tissue, and writes into DIR:
  features_MODEL/SLIDE.h5       features [N,D] float32, coords [N,2] int32 (level-0 pixels)
  predictions_MODEL/SLIDE.h5    predictions [N,G], coords, genes; and SLIDE.csv
  tissue/SLIDE.png, .geojson    tissue mask at 8 MPP; polygons in level-0 pixels (QuPath)
  thumbnails/SLIDE.png          overview with the tissue outline and the tile grid
  heatmaps_MODEL/SLIDE_GENE.png with --heatmap GENE
  summary.csv                   slide,status,tiles,seconds,reason as slides finish
A slide is a TIFF, SVS or OpenSlide file, a folder of DICOM WSI files (one series), or a
DICOMweb series or study URL (…/studies/UID[/series/UID]; Authorization from
TILE_INFER_DICOMWEB_AUTHORIZATION). SLIDE is the file or folder name less its extension, a
DICOMweb series' UID; two slides with one name are refused. A MANIFEST is a CSV with a wsi
column (paths relative to the CSV, or URLs) and optionally mpp (TRIDENT's convention). A
slide that fails (unreadable, no MPP, no tissue) is recorded in the summary and the others go on.
tiles: PNG tiles at MODEL's size; x and y from the names (x<N>_y<N> or <N>_<N>.png) or from a
CSV plan with file,x,y columns. Writes the features/predictions files named after DIR; a damaged
tile file, or one the model cannot take (another size), is recorded in the summary and the others
go on.

A rerun of the same command skips finished slides (without reading them when the file is
unchanged since) and resumes the others: finished tiles are not posted again, and the files are
the same as an uninterrupted run's. A slide finished under another plan (model, tile, MPP,
--min-tissue, tissue model) is redone; an output added (--heatmap) is made from the kept results.
One run writes into DIR at a time (DIR/tile-infer.lock; per shard with --shard).
Exit status: 0 all done, 3 some slides or tiles failed, 2 a usage error, 1 the run could not go
on (no server answering, the model not served).

Options:
  --model MODEL          model name (required)
  --out DIR              output folder (required)
  --server URL           service URL, repeatable (default http://127.0.0.1:8000)
  --concurrency N        tiles in flight over all servers (default 8 per server)
  --slides-in-flight N   slides read at once (default ${SLIDES_IN_FLIGHT} here: from the cores)
  --threads N            reader threads that decode and encode tiles (default ${CORES}: the cores; at most ${MAX_THREADS})
  --shard I/C            run shard I (from 0) of C: slide k of the cohort is in shard k mod C;
                         writes summary.I-of-C.csv. Default from a Slurm job array
                         (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT) or, with --shards C, a
                         Kubernetes Indexed Job's JOB_COMPLETION_INDEX
  --shards C             the shard count for JOB_COMPLETION_INDEX
  --min-tissue F         keep tiles whose tissue fraction is at least F (default 0.25)
  --mpp F                level-0 microns per pixel for every slide (a manifest's mpp column wins)
                         (tiles: the MPP the tiles were cut at; default the model's)
  --tissue-model NAME    tissue segmentation model (default tissue-seg)
  --heatmap GENE         also draw a heatmap of this predicted gene
  --no-overwrite         fail a slide finished in DIR under another plan instead of redoing it
  --deadline S           give up on a tile after S seconds of retries (default 300)
  --plan FILE            tiles: the CSV plan
  -h, --help             this text`;

function usage(message: string): never {
  throw new UsageError('TILE_ERR_CLIENT_USAGE', message);
}

/** A numeric option: `fallback` when absent; one `check` refuses is a usage error saying what
 *  `expected`. */
function number(
  value: string | undefined,
  name: string,
  fallback: number,
  [check, expected]: [(v: number) => boolean, string],
): number {
  if (value === undefined) return fallback;
  const v = Number(value);
  if (!Number.isFinite(v) || !check(v)) usage(`--${name} ${value}: expected ${expected}`);
  return v;
}

/** A --server is a service's root: http(s)://host:port, nothing after it (the API's paths are
 *  fixed, so a path or query there is a mistake, not a prefix). */
function serverUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    usage(`--server ${value}: not a URL; expected http://HOST:PORT`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    usage(`--server ${value}: ${url.protocol} is not http: or https:; expected http://HOST:PORT`);
  if (url.pathname !== '/' || url.search || url.hash || url.username || url.password)
    usage(`--server ${value}: a service is named by its root, http://HOST:PORT, with no path, query, fragment or user`);
  return `${url.protocol}//${url.host}`;
}

const integer = (min: number, max = Number.MAX_SAFE_INTEGER): [(v: number) => boolean, string] => [
  (v) => Number.isInteger(v) && v >= min && v <= max,
  max === Number.MAX_SAFE_INTEGER ? `an integer from ${min}` : `an integer from ${min} to ${max}`,
];

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        model: { type: 'string' },
        out: { type: 'string' },
        server: { type: 'string', multiple: true },
        concurrency: { type: 'string' },
        'slides-in-flight': { type: 'string' },
        threads: { type: 'string' },
        shard: { type: 'string' },
        shards: { type: 'string' },
        'min-tissue': { type: 'string' },
        mpp: { type: 'string' },
        'tissue-model': { type: 'string' },
        heatmap: { type: 'string' },
        deadline: { type: 'string' },
        plan: { type: 'string' },
        'no-overwrite': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    usage(`${(err as Error).message}\n\n${HELP}`);
  }
  const { values, positionals } = parsed;
  if (values.help || !positionals.length) {
    process.stdout.write(HELP + '\n');
    return 0;
  }
  const [command, ...inputs] = positionals;
  if (command !== 'slide' && command !== 'tiles') usage(`unknown command "${command}" (slide or tiles)`);
  if (!inputs.length) usage(`${command}: name at least one ${command === 'slide' ? 'slide or manifest' : 'folder'}`);
  if (!values.model) usage('--model is required');
  if (!values.out) usage('--out is required');
  const servers = (values.server ?? ['http://127.0.0.1:8000']).map(serverUrl);
  const concurrency = number(values.concurrency, 'concurrency', 8 * servers.length, integer(1));
  const slidesInFlight = number(values['slides-in-flight'], 'slides-in-flight', SLIDES_IN_FLIGHT, integer(1));
  const threads = number(values.threads, 'threads', CORES, integer(1, MAX_THREADS));
  const minTissue = number(values['min-tissue'], 'min-tissue', 0.25, [
    (v) => v >= 0 && v <= 1,
    'a fraction from 0 to 1',
  ]);
  const mpp =
    values.mpp === undefined
      ? undefined
      : number(values.mpp, 'mpp', 0, [mppInRange, `microns per pixel from ${MPP_RANGE[0]} to ${MPP_RANGE[1]}`]);
  const deadline = number(values.deadline, 'deadline', 300, [(v) => v > 0, 'seconds, more than 0']);
  const shard = shardOf(values.shard, values.shards);
  const cohort =
    command === 'slide'
      ? inShard(await expandStudies(readCohort(inputs)), shard)
      : inputs.map((dir): CohortSlide => ({ label: dir, path: dir, stem: dir, from: 'the command line' }));
  const outDir = values.out;

  const client = new TileClient({ servers, concurrency, deadlineMs: deadline * 1000 });
  try {
    // Before any work: a server that does not answer is an error now, not a deadline later.
    for (const silent of await client.reachable())
      process.stderr.write(`tile-infer: ${silent} does not answer; going on with the others\n`);
    const model = await client.metadata(values.model);
    const plan = modelPlan(model);
    if (model.tile.width !== model.tile.height)
      throw new UsageError(
        'TILE_ERR_CLIENT_TILE_SHAPE',
        `model ${model.model} takes ${model.tile.width}x${model.tile.height} tiles; slides are tiled in squares`,
      );
    if (values.heatmap !== undefined && (!plan.prediction || !(model.output_genes ?? []).includes(values.heatmap))) {
      throw new UsageError(
        'TILE_ERR_CLIENT_HEATMAP_GENE',
        `--heatmap ${values.heatmap}: not an output gene of ${model.model} (${(model.output_genes ?? []).join(', ') || 'no predictions'})`,
      );
    }
    // Raw pixels (or a tile file's PNG as it is) when every server takes them for the model.
    const takes = await client.bodyTypes(plan.path);
    const tissueModel = values['tissue-model'] ?? 'tissue-seg';
    const tissueSha256 = command === 'slide' ? (await client.metadata(tissueModel)).sha256 : '';
    makeDir(outDir);
    lockOutput(outDir, shard, (note) => process.stderr.write(`tile-infer: ${note}\n`));
    if (shard)
      process.stderr.write(
        `tile-infer: shard ${shard.index} of ${shard.count} (${shard.from}): ${cohort.length} slides\n`,
      );
    const order = new Map(cohort.map((s, k) => [s.label, k]));
    const summary = new Summary(join(outDir, summaryName(shard)), (label) => order.get(label) ?? cohort.length);
    const progress = new CohortProgress(cohort.length, () => ({ retries: client.retries, waiting: client.waiting }));
    try {
      if (command === 'tiles') {
        for (const entry of cohort) {
          const started = performance.now();
          try {
            const r = await processTiles({
              dir: entry.path,
              model,
              plan,
              outDir,
              client,
              pngBodies: takes.has('image/png'),
              concurrency,
              tilePlan: values.plan,
              mpp,
              onPlan: (total, done) => progress.plan(total, done),
            });
            const seconds = (performance.now() - started) / 1000;
            for (const f of r.failed)
              summary.record({ slide: f.file, status: 'failed', tiles: 0, seconds: 0, reason: f.reason }, entry.label);
            summary.record({
              slide: entry.label,
              status: r.tiles ? 'done' : 'failed',
              tiles: r.tiles,
              seconds,
              reason: r.failed.length ? `${r.failed.length} tile files failed (listed below)` : '',
            });
            progress.slideDone(
              `${entry.label}: ${r.tiles} tiles in ${seconds.toFixed(1)} s, ${client.retries} retries${r.failed.length ? `, ${r.failed.length} tile files failed` : ''}; wrote ${r.files.join(', ') || 'nothing'}`,
            );
          } catch (err) {
            recordFailure(summary, progress, entry.label, started, err as Error);
          }
        }
      } else {
        const pool = new ReaderPool(threads);
        try {
          const bodyType = takes.has('application/octet-stream') ? 'application/octet-stream' : 'application/json';
          const run: SlideRun = {
            model,
            plan,
            outDir,
            client,
            bodyType,
            pool,
            concurrency,
            minTissue,
            tissueModel,
            tissueSha256,
            noOverwrite: values['no-overwrite'] ?? false,
            mpp,
            heatmap: values.heatmap,
            onPlan: (total, done) => progress.plan(total, done),
          };
          await runCohort(run, cohort, slidesInFlight, summary, progress);
        } finally {
          await pool.close();
        }
      }
    } finally {
      progress.stop();
    }
    if (summary.failed) process.stderr.write(`tile-infer: ${summary.failed} failed; see ${summary.path}\n`);
    return summary.failed ? 3 : 0;
  } finally {
    await client.close();
  }
}

// Ctrl-C and kill end the run through exit, whose handlers give the output folder's lock back.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const)
  process.once(signal, () => process.exit(code));

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    process.stderr.write(`tile-infer: ${errorLine(err)}\n`);
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
