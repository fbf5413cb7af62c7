// Whole-slide throughput: tile-infer's pipeline on a generated 0.25 MPP SVS-style slide (JPEG
// decode, 2x reduction to 0.5 MPP, stored PNG, HTTP) against the service's own throughput on the
// very same request bodies at the same concurrency (autocannon, run before and after the slide),
// in one run after a warm-up slide; and the client's CPU per tile, in total and per stage.
// Alone: `npm run bench:slide -- [--url=URL] [--concurrency=8]` (without --url it starts the
// service from config/default.json on a free port).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TileClient, tileRequestBody } from '../src/client/tile-client.js';
import { tileGrid } from '../src/client/pipeline/grid.js';
import { processSlide } from '../src/client/pipeline/process-slide.js';
import { expectTiles, readTile } from '../src/client/slide/region.js';
import { encodeRgbPng } from '../src/tile/png-write.js';
import { TiffSlide } from '../src/client/slide/tiff-slide.js';
import { readTissueMask } from '../src/client/pipeline/tissue.js';
import { writeSlide, type SlideSpec } from '../tools/synthetic/slide.js';
import { drive, type Span } from './load.js';
import { shippedConfig, spawnService, waitFor } from '../tools/service-process.js';

const MODEL = 'gene-expr';
const PATH = `/api/predict/${MODEL}?mode=prediction_with_embedding`;
const SLIDE: SlideSpec = {
  widthUm: 2000,
  heightUm: 1400,
  mpp: 0.25,
  seed: 21,
  format: 'svs',
  islands: [
    { cx: 560, cy: 640, rx: 420, ry: 480 },
    { cx: 1400, cy: 700, rx: 480, ry: 560 },
  ],
};

export interface SlideBench {
  concurrency: number;
  tiles: number;
  /** Whole slide: open, tissue, tiles, outputs. */
  slideSeconds: number;
  /** Tiles per second while the tiles were posted. */
  tilesPerSec: number;
  /** The service alone on the same bodies at the same concurrency: the mean of a run before and
   *  one after the slide. */
  serviceTilesPerSec: number;
  serviceRuns: [number, number];
  /** tilesPerSec / serviceTilesPerSec. */
  ratio: number;
  /** Client process CPU (all threads) per tile during the tile stage. */
  clientCpuMsPerTile: number;
  /** CPU ms per tile of each client stage, measured one tile at a time: read (the TIFF tiles
   *  decoded by libvips in bands cut to the grid, assembly, 2x reduction), PNG (stored deflate),
   *  JSON body bytes with the base64. */
  stagesMs: { read: number; png: number; body: number };
}

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

export async function benchSlide(url: string, concurrency: number, span: Span = { seconds: 8 }): Promise<SlideBench> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-slide-'));
  try {
    const slidePath = join(dir, 'bench-slide.svs');
    await writeSlide(slidePath, SLIDE);
    const client = new TileClient({ servers: [url], concurrency });
    /** One whole slide into a fresh folder; the tile stage timed from the grid to the last tile. */
    const runSlide = async (outDir: string) => {
      const stage = { start: 0, cpu: 0, end: 0, cpuEnd: 0 };
      const start = performance.now();
      const result = await processSlide({
        slide: slidePath,
        model: MODEL,
        outDir,
        client,
        concurrency,
        minTissue: 0.25,
        tissueModel: 'tissue-seg',
        onPlan: () => {
          stage.start = performance.now();
          stage.cpu = cpuMs();
          return {
            tick: () => {
              stage.end = performance.now();
              stage.cpuEnd = cpuMs();
            },
          };
        },
      });
      return { tiles: result.tiles, seconds: (performance.now() - start) / 1000, tilesPerSec: result.tiles / ((stage.end - stage.start) / 1000), cpuMsPerTile: (stage.cpuEnd - stage.cpu) / result.tiles };
    };
    // The first run warms the service and the client and gives the tissue mask for the bodies.
    await runSlide(join(dir, 'warm-up'));

    // The same tiles, one at a time, stage by stage; and their request bodies for the service run.
    const slide = await TiffSlide.open(slidePath);
    const mask = await readTissueMask(join(dir, 'warm-up/tissue/bench-slide.png'));
    const grid = tileGrid(slide.levels[0].width, slide.levels[0].height, SLIDE.mpp, 224, 0.5, mask, 0.25);
    expectTiles(slide, grid.tiles, grid.extent, 224);
    const sums = { read: 0, png: 0, body: 0 };
    const bodies: string[] = [];
    for (const t of grid.tiles) {
      let c = cpuMs();
      const tile = await readTile(slide, t.x, t.y, grid.extent, 224);
      sums.read += cpuMs() - c;
      c = cpuMs();
      const png = encodeRgbPng(tile.rgb, 224, 224);
      sums.png += cpuMs() - c;
      c = cpuMs();
      const body = tileRequestBody(png, { slide_name: 'bench-slide', x: t.x, y: t.y, width: 224, height: 224, patch_idx: t.idx, tissue_ratio: t.tissue, resolution: 0.5 });
      sums.body += cpuMs() - c;
      bodies.push(body.toString());
    }
    await slide.close();
    // Service alone, the slide, the service alone again: the host's load drifts (shared machines),
    // so the slide is compared with the mean of the runs around it.
    const before = await drive(url, MODEL, PATH, bodies, concurrency, span);
    const measured = await runSlide(join(dir, 'measured'));
    const after = await drive(url, MODEL, PATH, bodies, concurrency, span);
    await client.close();
    const serviceTilesPerSec = (before.tilesPerSec + after.tilesPerSec) / 2;
    const per = (v: number) => v / grid.tiles.length;
    return {
      concurrency,
      tiles: measured.tiles,
      slideSeconds: measured.seconds,
      tilesPerSec: measured.tilesPerSec,
      serviceTilesPerSec,
      serviceRuns: [before.tilesPerSec, after.tilesPerSec],
      ratio: measured.tilesPerSec / serviceTilesPerSec,
      clientCpuMsPerTile: measured.cpuMsPerTile,
      stagesMs: { read: per(sums.read), png: per(sums.png), body: per(sums.body) },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const concurrency = Number(arg('concurrency') ?? 8);
  const service = arg('url') ? null : await spawnService(shippedConfig());
  const url = arg('url') ?? service!.url;
  try {
    await waitFor(async () => (await fetch(`${url}/health/ready`)).ok, 120000);
    const r = await benchSlide(url, concurrency);
    console.log(JSON.stringify(r, null, 2));
  } finally {
    service?.proc.kill('SIGTERM');
  }
}
