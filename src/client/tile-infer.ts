#!/usr/bin/env node
// tile-infer: whole slides (or folders of tiles) through the tile service.
import { parseArgs } from 'node:util';
import { CodedError } from '../lib/errors.js';
import { TileClient } from './tile-client.js';
import { processSlide } from './pipeline/process-slide.js';
import { processTiles } from './pipeline/process-tiles.js';
import { ProgressLine } from './progress.js';
import { UsageError } from './usage-error.js';

const HELP = `Usage:
  tile-infer slide SLIDE... --model MODEL --out DIR [options]
  tile-infer tiles DIR --model MODEL --out DIR [--plan PLAN.csv] [options]

slide: finds tissue at 8 MPP with the tissue model, lays MODEL's tile grid (tile size and MPP
from /api/metadata/MODEL) over it, posts the tiles with tissue, and writes into DIR:
  features_MODEL/SLIDE.h5       features [N,D] float32, coords [N,2] int32 (level-0 pixels)
  predictions_MODEL/SLIDE.h5    predictions [N,G], coords, genes; and SLIDE.csv
  tissue/SLIDE.png, .geojson    tissue mask at 8 MPP; polygons in level-0 pixels (QuPath)
  thumbnails/SLIDE.png          overview with the tissue outline and the tile grid
  heatmaps_MODEL/SLIDE_GENE.png with --heatmap GENE
tiles: PNG tiles at MODEL's size; x and y from the names (x<N>_y<N> or <N>_<N>.png) or from a
CSV plan with file,x,y columns. Writes the features/predictions files named after DIR.

A rerun with the same arguments resumes: finished tiles are not posted again, and the files are
the same as those of an uninterrupted run.

Options:
  --model MODEL        model name (required)
  --out DIR            output folder (required)
  --server URL         service URL, repeatable (default http://127.0.0.1:8000)
  --concurrency N      tiles in flight (default 8)
  --min-tissue F       keep tiles whose tissue fraction is at least F (default 0.25)
  --mpp F              level-0 microns per pixel, for slides whose metadata has none
                       (tiles: the MPP the tiles were cut at; default the model's)
  --tissue-model NAME  tissue segmentation model (default tissue-seg)
  --heatmap GENE       also draw a heatmap of this predicted gene
  --deadline S         give up on a tile after S seconds of retries (default 300)
  --plan FILE          tiles: the CSV plan
  -h, --help           this text`;

/** One line on stderr, "tile-infer: [CODE] message"; exit status 2 for a command to change, 1
 *  otherwise. */
function report(err: Error): never {
  process.stderr.write(`tile-infer: ${err instanceof CodedError ? `[${err.code}] ` : ''}${err.message}\n`);
  process.exit(err instanceof UsageError ? 2 : 1);
}

function fail(message: string): never {
  report(new UsageError('TILE_ERR_CLIENT_USAGE', message));
}

function number(value: string | undefined, name: string, fallback: number, check: (v: number) => boolean): number {
  if (value === undefined) return fallback;
  const v = Number(value);
  if (!Number.isFinite(v) || !check(v)) fail(`--${name} ${value}: not a valid value`);
  return v;
}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        model: { type: 'string' },
        out: { type: 'string' },
        server: { type: 'string', multiple: true },
        concurrency: { type: 'string' },
        'min-tissue': { type: 'string' },
        mpp: { type: 'string' },
        'tissue-model': { type: 'string' },
        heatmap: { type: 'string' },
        deadline: { type: 'string' },
        plan: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    fail(`${(err as Error).message}\n\n${HELP}`);
  }
  const { values, positionals } = parsed;
  if (values.help || !positionals.length) {
    process.stdout.write(HELP + '\n');
    return;
  }
  const [command, ...inputs] = positionals;
  if (command !== 'slide' && command !== 'tiles') fail(`unknown command "${command}" (slide or tiles)`);
  if (!inputs.length) fail(`${command}: name at least one ${command === 'slide' ? 'slide' : 'folder'}`);
  if (!values.model) fail('--model is required');
  if (!values.out) fail('--out is required');
  const concurrency = number(values.concurrency, 'concurrency', 8, (v) => Number.isInteger(v) && v >= 1);
  const minTissue = number(values['min-tissue'], 'min-tissue', 0.25, (v) => v >= 0 && v <= 1);
  const mpp = values.mpp === undefined ? undefined : number(values.mpp, 'mpp', 0, (v) => v > 0);
  const deadline = number(values.deadline, 'deadline', 300, (v) => v > 0);
  const client = new TileClient({ servers: values.server ?? ['http://127.0.0.1:8000'], concurrency, deadlineMs: deadline * 1000 });
  const onPlan = (label: string) => (total: number, done: number) => new ProgressLine(label, total, done, () => client.retries);
  try {
    for (const input of inputs) {
      const started = performance.now();
      const result =
        command === 'slide'
          ? await processSlide({ slide: input, model: values.model, outDir: values.out, client, concurrency, minTissue, tissueModel: values['tissue-model'] ?? 'tissue-seg', mpp, heatmap: values.heatmap, onPlan: onPlan(input) })
          : await processTiles({ dir: input, model: values.model, outDir: values.out, client, concurrency, plan: values.plan, mpp, onPlan: onPlan(input) });
      process.stderr.write(`${input}: ${result.tiles} tiles in ${((performance.now() - started) / 1000).toFixed(1)} s, ${client.retries} retries; wrote ${result.files.join(', ')}\n`);
    }
  } finally {
    await client.close();
  }
}

main().catch(report);
