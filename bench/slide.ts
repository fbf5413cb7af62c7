// Whole slides and cohorts through tile-infer's pipeline (in this process, reader pool included)
// against a service serving a null model (mean colour: only our code is measured), in one run:
//   1. the pipeline on one 0.5 MPP JPEG TIFF against the service alone on the very same request
//      bodies at the same concurrency (autocannon, run before and after each pipeline run; the
//      host's load drifts, so each ratio compares runs seconds apart), repeated;
//   2. the client's CPU ms per tile by stage (decode, the rest of reading and encoding on the
//      pool, posting) and for the whole pipeline, on that slide and on a 0.25 MPP SVS;
//   3. slides/hour for a cohort of 8 synthetic slides (0.5 and 0.25 MPP, TIFF and SVS), and its
//      tile rate against the same slides run one at a time;
//   4. the 0.5 MPP TIFF from other sources, each run beside the local TIFF: as an OME-TIFF written
//      by tifffile (the same JPEG tiles), over HTTP range requests from nginx (the bytes fetched
//      against the bytes of the JPEG tiles used), from an S3-compatible server (s3rver), as
//      OrthancWSIDicomizer's DICOM copies (whole levels, levels split; the latter from s3rver too)
//      and from a local Orthanc's DICOMweb; each source and the TIFF in turn, --repeats times,
//      the median pair reported (BENCH_SOURCE=TEXT: only the sources whose name holds TEXT).
// --smoke runs it all on small slides (a cohort of 4) for seconds: CI's check that it works.
// `npm run bench:slide -- [--concurrency=16] [--seconds=8] [--repeats=3] [--smoke]`.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { TileClient } from '../src/client/tile-client.js';
import { tileQuery, type MadeBody } from '../src/client/tile-body.js';
import { tileGrid } from '../src/client/pipeline/grid.js';
import { modelPlan } from '../src/client/pipeline/inference.js';
import type { SlideRun } from '../src/client/pipeline/process-slide.js';
import { ReaderPool } from '../src/client/pipeline/reader-pool.js';
import { defaultSlidesInFlight, runCohort } from '../src/client/pipeline/run-cohort.js';
import { tileBodies } from '../src/client/pipeline/tile-reader.js';
import { readOverview, readTissueMask } from '../src/client/pipeline/tissue.js';
import { Summary, stemOf, type CohortSlide } from '../src/client/pipeline/cohort.js';
import { planBands, TILES_PER_BAND } from '../src/client/slide/bands.js';
import { openSlide } from '../src/client/slide/open.js';
import { tileRegion } from '../src/client/slide/region.js';
import type { TiffSlide } from '../src/client/slide/tiff-slide.js';
import { startNginx, startS3rver } from '../tools/remote-servers.js';
import { writeSlide, type SlideSpec } from '../tools/synthetic/slide.js';
import { spawnService, waitFor, ROOT } from '../tools/service-process.js';
import { drive, type BenchBody, type Span } from './load.js';
import { writeNullPackage } from './null-models.js';
import { median, medianOf } from './stats.js';
import { dicomCopies } from './dicom-copies.js';

const MODEL = 'null-224';
const PATH = `/api/predict/${MODEL}`;

const islands = (w: number, h: number) => [
  { cx: w * 0.28, cy: h * 0.5, rx: w * 0.2, ry: h * 0.3 },
  { cx: w * 0.72, cy: h * 0.45, rx: w * 0.16, ry: h * 0.32 },
];
const slideSpec = (
  format: 'tiff' | 'svs',
  mpp: number,
  widthUm: number,
  heightUm: number,
  seed: number,
): SlideSpec => ({ widthUm, heightUm, mpp, seed, format, islands: islands(widthUm, heightUm) });

export interface PipelineRun {
  tiles: number;
  /** Tiles per second from the first tile to the last. */
  tilesPerSec: number;
  serviceBefore: number;
  serviceAfter: number;
  /** tilesPerSec over the mean of the service-alone runs around it. */
  ratio: number;
  /** Client process CPU (every thread) per tile over the tile stage. */
  clientCpuMsPerTile: number;
}

export interface StageCosts {
  slide: string;
  tiles: number;
  /** CPU ms per tile: decoding the TIFF tiles the grid needs (each once), the rest of reading and
   *  encoding (cutting, resampling, PNG, base64, JSON, moving the bodies to the main thread),
   *  posting the bodies (main thread: HTTP, answers), and the whole pipeline's tile stage. */
  decode: number;
  encode: number;
  post: number;
  pipeline: number;
}

export interface SlideBench {
  concurrency: number;
  threads: number;
  slide: string;
  tiles: number;
  runs: PipelineRun[];
  /** Median of the runs' ratios, and the client CPU of that run. */
  ratio: number;
  clientCpuMsPerTile: number;
  stages: StageCosts[];
  cohort: {
    slides: number;
    tiles: number;
    seconds: number;
    slidesPerHour: number;
    tilesPerSec: number;
    oneAtATimeTilesPerSec: number;
    ratio: number;
    slidesInFlight: number;
  };
  sources: SourceRow[];
}

/** The 0.5 MPP TIFF read from another source, each run against the local TIFF run just before it
 *  (--smoke: the one TIFF run before them all); figures are the medians of `repeats` such pairs. */
export interface SourceRow {
  source: string;
  tiles: number;
  tilesPerSec: number;
  tiffTilesPerSec: number;
  /** The median of the pairs' tilesPerSec / tiffTilesPerSec. */
  ratio: number;
  /** Each pair's ratio. */
  ratios: number[];
  cpuMsPerTile: number;
  tiffCpuMsPerTile: number;
  /** HTTP: bytes the server sent for the slide (its access log), and the bytes of the JPEG tiles
   *  the pipeline decodes (the overview's level and the tiles' bands). */
  fetchedBytes?: number;
  tileBytes?: number;
}

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** A made body as autocannon sends it (bench/load.ts). */
const benchBody = (made: MadeBody): BenchBody =>
  made.type === 'application/json'
    ? made.bytes.toString('latin1')
    : { type: made.type, body: Buffer.from(made.bytes), query: tileQuery(made.fields) };

interface Setup {
  url: string;
  client: TileClient;
  /** The body type tile-infer picks for the service (raw pixels: it takes them). */
  bodyType: SlideRun['bodyType'];
  pool: ReaderPool;
  run: (outDir: string) => SlideRun;
}

/** A cohort into a fresh folder, timed end to end and over the tile stage. */
async function timedCohort(setup: Setup, slides: CohortSlide[], outDir: string, inFlight: number) {
  const stage = { start: 0, cpu: 0, end: 0, cpuEnd: 0, tiles: 0 };
  const run = setup.run(outDir);
  run.onPlan = (total, done) => {
    if (!stage.start) [stage.start, stage.cpu] = [performance.now(), cpuMs()];
    stage.tiles += total - done;
    return { tick: () => ([stage.end, stage.cpuEnd] = [performance.now(), cpuMs()]) };
  };
  const summary = new Summary(join(outDir, 'summary.csv'), () => 0);
  const started = performance.now();
  await runCohort(run, slides, inFlight, summary, { slideDone: () => {} });
  if (summary.failed) throw new Error(`${summary.failed} slides failed:\n${readFileSync(summary.path, 'utf8')}`);
  return {
    tiles: stage.tiles,
    seconds: (performance.now() - started) / 1000,
    tilesPerSec: stage.tiles / ((stage.end - stage.start) / 1000),
    cpuMsPerTile: (stage.cpuEnd - stage.cpu) / stage.tiles,
  };
}

/** The request bodies of a slide's tiles (the grid from a finished run's tissue mask). */
async function slideBodies(setup: Setup, slide: CohortSlide, mpp: number, outDir: string) {
  const s = await openSlide(slide.path);
  const mask = await readTissueMask(join(outDir, 'tissue', `${slide.stem}.png`));
  const grid = tileGrid({
    width: s.levels[0].width,
    height: s.levels[0].height,
    mpp0: mpp,
    tileSize: 224,
    tileMpp: 0.5,
    mask,
    minTissue: 0.25,
  });
  const fields = (t: (typeof grid.tiles)[number]) => ({
    slide_name: slide.stem,
    x: t.x,
    y: t.y,
    width: 224,
    height: 224,
    patch_idx: t.idx,
    tissue_ratio: t.tissue,
    resolution: 0.5,
  });
  return {
    slide: s,
    grid,
    fields,
    read: () =>
      tileBodies({
        pool: setup.pool,
        type: setup.bodyType,
        slide: s,
        tiles: grid.tiles,
        extent: grid.extent,
        size: 224,
        fields,
      }),
  };
}

async function stageCosts(
  setup: Setup,
  slide: CohortSlide,
  mpp: number,
  warmDir: string,
  concurrency: number,
  pipelineCpu: number,
): Promise<StageCosts> {
  const { slide: s, grid, read } = await slideBodies(setup, slide, mpp, warmDir);
  const placed = grid.tiles.map((t) => tileRegion(s, t.x, t.y, grid.extent, 224));
  const level = placed[0].level;
  const plan = planBands(s.bandSource!(level), [placed.map((p) => p.region)]);
  let c = cpuMs();
  await Promise.all(
    plan.bands.map(async (b) => {
      const job = await s.bandJob!(level, b.ty, b.tx0, b.tx1);
      const data = setup.pool.bandBuffer(TILES_PER_BAND * job.tileWidth * job.tileHeight * 3);
      await setup.pool.decode({ job, into: data });
      setup.pool.releaseBand(data);
    }),
  );
  const decode = cpuMs() - c;
  const bodies: MadeBody[] = [];
  c = cpuMs();
  for await (const { body } of read()) bodies.push(body);
  const readEncode = cpuMs() - c;
  c = cpuMs();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < bodies.length) await setup.client.infer(PATH, bodies[next++]);
    }),
  );
  const post = cpuMs() - c;
  await s.close();
  const n = grid.tiles.length;
  return {
    slide: slide.label,
    tiles: n,
    decode: decode / n,
    encode: (readEncode - decode) / n,
    post: post / n,
    pipeline: pipelineCpu,
  };
}

/** The 0.5 MPP TIFF from each other source, each against the local TIFF run just before it,
 *  `repeats` times in turn (--smoke: one TIFF run before them all, and one DICOM copy: it checks
 *  that each kind runs). */
async function sourceRows(
  setup: Setup,
  tiff: CohortSlide,
  dir: string,
  warm: string,
  smoke: boolean,
  scale: number,
  repeats: number,
): Promise<SourceRow[]> {
  const name = basename(tiff.path);
  const served = join(dir, 'served');
  mkdirSync(join(served, 'ome'), { recursive: true });
  symlinkSync(tiff.path, join(served, name));
  const ome = join(served, 'ome', name);
  execFileSync('/usr/bin/python3', [join(ROOT, 'tools/synthetic/ome-tiff.py'), tiff.path, ome, '0.5']);
  const nginx = await startNginx(served);
  const s3 = await startS3rver('bench');
  const dicom = await dicomCopies(tiff.path, [(6144 * scale) / 1000, (4096 * scale) / 1000], dir, smoke);
  const saved = Object.fromEntries(Object.keys(s3.env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, s3.env);
  try {
    const put = new S3Client({ forcePathStyle: true });
    await put.send(new PutObjectCommand({ Bucket: 'bench', Key: name, Body: readFileSync(tiff.path) }));
    for (const f of dicom.files)
      await put.send(new PutObjectCommand({ Bucket: 'bench', Key: `dicom/${basename(f)}`, Body: readFileSync(f) }));
    put.destroy();
    const url = `${nginx.url}/${name}`;
    const at = (path: string): CohortSlide => ({ label: path, path, stem: tiff.stem, from: 'the bench' });
    const sources = [
      { source: 'OME-TIFF (tifffile)', slide: at(ome) },
      { source: 'HTTP ranges (nginx)', slide: at(url) },
      { source: 'S3 (s3rver)', slide: at(`s3://bench/${name}`) },
      ...dicom.copies,
      {
        source: `DICOM files in S3 (s3rver), levels split`,
        slide: { label: 's3://bench/dicom/', path: 's3://bench/dicom/', stem: 'dicom-s3', from: 'the bench' },
      },
    ].filter((x) => !process.env.BENCH_SOURCE || x.source.includes(process.env.BENCH_SOURCE));
    const rows: SourceRow[] = [];
    let runs = 0;
    let local = await timedCohort(setup, [tiff], join(dir, 'beside-0'), 1);
    for (const { source, slide } of sources) {
      const pairs: { local: typeof local; other: typeof local }[] = [];
      let fetchedBytes: number | undefined;
      for (let r = 0; r < (smoke ? 1 : repeats); r++) {
        if (!smoke && runs) local = await timedCohort(setup, [tiff], join(dir, `beside-${runs}`), 1);
        const logged = nginx.log().length;
        pairs.push({ local, other: await timedCohort(setup, [slide], join(dir, `source-${runs++}`), 1) });
        if (slide.path === url)
          fetchedBytes = nginx
            .log()
            .slice(logged)
            .reduce((n, line) => n + Number(line.split(' ')[1]), 0);
      }
      const ratios = pairs.map((p) => p.other.tilesPerSec / p.local.tilesPerSec);
      const mid = medianOf(pairs, (p) => p.other.tilesPerSec / p.local.tilesPerSec) ?? pairs[0];
      const row: SourceRow = {
        source,
        tiles: mid.other.tiles,
        tilesPerSec: mid.other.tilesPerSec,
        tiffTilesPerSec: mid.local.tilesPerSec,
        ratio: median(ratios),
        ratios,
        cpuMsPerTile: median(pairs.map((p) => p.other.cpuMsPerTile)),
        tiffCpuMsPerTile: median(pairs.map((p) => p.local.cpuMsPerTile)),
      };
      if (fetchedBytes !== undefined) {
        row.fetchedBytes = fetchedBytes;
        // The same reads in this process, counting the JPEG tiles' bytes they decode.
        const { slide: opened, read } = await slideBodies(setup, at(url), 0.5, warm);
        await readOverview(opened, 0.5);
        for await (const _ of read());
        row.tileBytes = (opened as TiffSlide).tileBytes;
        await opened.close();
      }
      rows.push(row);
    }
    return rows;
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await nginx.stop();
    await s3.stop();
    await dicom.stop();
  }
}

export interface SlideBenchOptions {
  concurrency?: number;
  span?: Span;
  repeats?: number;
  smoke?: boolean;
  threads?: number;
}

export async function benchSlide(options: SlideBenchOptions = {}): Promise<SlideBench> {
  const { smoke = false } = options;
  const concurrency = options.concurrency ?? 16;
  const span = options.span ?? (smoke ? { perConnection: 3 } : { seconds: 8 });
  const repeats = options.repeats ?? (smoke ? 1 : 3);
  const dir = mkdtempSync(join(tmpdir(), 'bench-slide-'));
  // The model repository: the null model beside the shipped tissue-seg.
  const models = join(dir, 'models');
  mkdirSync(models);
  writeNullPackage(models, 224);
  symlinkSync(join(ROOT, 'models/tissue-seg'), join(models, 'tissue-seg'));
  const service = await spawnService({
    model_repository: models,
    models: [
      { name: 'tissue-seg', instances: 1, gpus: [], intra_op_threads: 1 },
      { name: MODEL, instances: 2, gpus: [], intra_op_threads: 1, max_queue: 256 },
    ],
    supervisor: { drain_delay_ms: 0 },
  });
  try {
    await waitFor(async () => (await fetch(`${service.url}/health/ready`)).ok, 120000);
    // The issue's slide: 12,288 x 8,192 px at 0.5 MPP with JPEG tiles (smoke: a small one), and a
    // 0.25 MPP SVS for the 2x reduction.
    const scale = smoke ? 0.15 : 1;
    const write = async (name: string, spec: SlideSpec): Promise<CohortSlide> => {
      const path = join(dir, name);
      await writeSlide(path, spec);
      return { label: name, path, stem: stemOf(name), from: 'the bench' };
    };
    const tiff = await write('bench-0.5mpp.tif', slideSpec('tiff', 0.5, 6144 * scale, 4096 * scale, 31));
    const svs = await write('bench-0.25mpp.svs', slideSpec('svs', 0.25, 3072 * scale, 2048 * scale, 32));
    const cohort: CohortSlide[] = [];
    for (const seed of smoke ? [1] : [1, 2]) {
      for (const [format, mpp] of [
        ['tiff', 0.5],
        ['svs', 0.5],
        ['tiff', 0.25],
        ['svs', 0.25],
      ] as const) {
        const size = (mpp === 0.5 ? 3072 : 2048) * scale;
        cohort.push(
          await write(
            `cohort-${seed}-${mpp}mpp-${format}.${format === 'svs' ? 'svs' : 'tif'}`,
            slideSpec(format, mpp, size, size * 0.75, 100 + seed * 10 + cohort.length),
          ),
        );
      }
    }

    const client = new TileClient({ servers: [service.url], concurrency });
    const pool = new ReaderPool(options.threads);
    const model = await client.metadata(MODEL);
    const tissueSha256 = (await client.metadata('tissue-seg')).sha256;
    const bodyType = (await client.bodyTypes(PATH)).has('application/octet-stream')
      ? 'application/octet-stream'
      : 'application/json';
    const setup: Setup = {
      url: service.url,
      client,
      bodyType,
      pool,
      run: (outDir) => ({
        model,
        plan: modelPlan(model),
        outDir,
        client,
        bodyType,
        pool,
        concurrency,
        minTissue: 0.25,
        tissueModel: 'tissue-seg',
        tissueSha256,
        noOverwrite: false,
      }),
    };
    try {
      // Warm-up: the service, the client's threads, and the tissue masks the bodies come from.
      const warm = join(dir, 'warm');
      await timedCohort(setup, [tiff, svs], warm, 2);
      const { read } = await slideBodies(setup, tiff, 0.5, warm);
      const bodies: BenchBody[] = [];
      for await (const { body } of read()) bodies.push(benchBody(body));

      const runs: PipelineRun[] = [];
      for (let r = 0; r < repeats; r++) {
        const before = await drive(service.url, MODEL, PATH, bodies, concurrency, span);
        const measured = await timedCohort(setup, [tiff], join(dir, `single-${r}`), 1);
        const after = await drive(service.url, MODEL, PATH, bodies, concurrency, span);
        runs.push({
          tiles: measured.tiles,
          tilesPerSec: measured.tilesPerSec,
          serviceBefore: before.tilesPerSec,
          serviceAfter: after.tilesPerSec,
          ratio: measured.tilesPerSec / ((before.tilesPerSec + after.tilesPerSec) / 2),
          clientCpuMsPerTile: measured.cpuMsPerTile,
        });
        console.error(
          `slide run ${r + 1}/${repeats}: ${measured.tilesPerSec.toFixed(1)} tiles/s, service alone ${before.tilesPerSec.toFixed(1)} / ${after.tilesPerSec.toFixed(1)}: ratio ${runs[r].ratio.toFixed(2)}; client ${measured.cpuMsPerTile.toFixed(2)} CPU ms/tile`,
        );
      }
      const mid = medianOf(runs, (r) => r.ratio) ?? runs[0];

      const svsRun = await timedCohort(setup, [svs], join(dir, 'single-svs'), 1);
      const stages = [
        await stageCosts(setup, tiff, 0.5, warm, concurrency, median(runs.map((r) => r.clientCpuMsPerTile))),
        await stageCosts(setup, svs, 0.25, warm, concurrency, svsRun.cpuMsPerTile),
      ];
      for (const s of stages)
        console.error(
          `${s.slide}: CPU ms/tile decode ${s.decode.toFixed(2)}, encode ${s.encode.toFixed(2)}, post ${s.post.toFixed(2)}; pipeline ${s.pipeline.toFixed(2)}`,
        );

      const sources = await sourceRows(setup, tiff, dir, warm, smoke, scale, repeats);
      for (const r of sources)
        console.error(
          `${r.source}: ${r.tilesPerSec.toFixed(1)} tiles/s against the TIFF's ${r.tiffTilesPerSec.toFixed(1)} (ratio ${r.ratio.toFixed(2)}, median of ${r.ratios.map((x) => x.toFixed(2)).join(', ')}); client ${r.cpuMsPerTile.toFixed(2)} CPU ms/tile (TIFF ${r.tiffCpuMsPerTile.toFixed(2)})${r.fetchedBytes ? `; fetched ${r.fetchedBytes} bytes for ${r.tileBytes} bytes of tiles (${(r.fetchedBytes / r.tileBytes!).toFixed(3)}x)` : ''}`,
        );

      // The cohort one slide at a time, then all of it with slides in flight.
      let oneTiles = 0;
      let oneSeconds = 0;
      for (const s of cohort) {
        const one = await timedCohort(setup, [s], join(dir, `alone-${s.stem}`), 1);
        oneTiles += one.tiles;
        oneSeconds += one.seconds;
      }
      const inFlight = defaultSlidesInFlight();
      const all = await timedCohort(setup, cohort, join(dir, 'cohort'), inFlight);
      const oneAtATime = oneTiles / oneSeconds;
      const cohortRate = all.tiles / all.seconds;
      console.error(
        `cohort of ${cohort.length}: ${all.tiles} tiles in ${all.seconds.toFixed(1)} s (${cohortRate.toFixed(1)} tiles/s, ${((cohort.length / all.seconds) * 3600).toFixed(0)} slides/hour); one at a time ${oneAtATime.toFixed(1)} tiles/s: ratio ${(cohortRate / oneAtATime).toFixed(2)}`,
      );
      return {
        concurrency,
        threads: pool.threads,
        slide: tiff.label,
        tiles: mid.tiles,
        runs,
        ratio: mid.ratio,
        clientCpuMsPerTile: mid.clientCpuMsPerTile,
        stages,
        cohort: {
          slides: cohort.length,
          tiles: all.tiles,
          seconds: all.seconds,
          slidesPerHour: (cohort.length / all.seconds) * 3600,
          tilesPerSec: cohortRate,
          oneAtATimeTilesPerSec: oneAtATime,
          ratio: cohortRate / oneAtATime,
          slidesInFlight: inFlight,
        },
        sources,
      };
    } finally {
      await pool.close();
      await client.close();
    }
  } finally {
    service.proc.kill('SIGTERM');
    await service.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

export function slideMarkdown(b: SlideBench): string {
  const f = (n: number, d = 1) => n.toFixed(d);
  return [
    `Whole slide (tile-infer's pipeline, ${b.tiles} tiles of ${b.slide}, null model, c=${b.concurrency}, ${b.threads} reader threads): ratio to the service alone on the same bodies ${b.runs.map((r) => f(r.ratio, 2)).join(', ')} (median ${f(b.ratio, 2)}); pipeline ${b.runs.map((r) => f(r.tilesPerSec)).join(', ')} tiles/s, service alone ${b.runs.map((r) => `${f(r.serviceBefore)}/${f(r.serviceAfter)}`).join(', ')}; client CPU ${b.runs.map((r) => f(r.clientCpuMsPerTile, 2)).join(', ')} ms/tile.`,
    '',
    '| slide | tiles | decode | rest of read + encode | post | pipeline (CPU ms/tile) |',
    '|---|---|---|---|---|---|',
    ...b.stages.map(
      (s) =>
        `| ${s.slide} | ${s.tiles} | ${f(s.decode, 2)} | ${f(s.encode, 2)} | ${f(s.post, 2)} | ${f(s.pipeline, 2)} |`,
    ),
    '',
    '| source | tiles/s | local TIFF tiles/s (run before it) | ratio: median (each pair) | client CPU ms/tile, median (TIFF) | bytes fetched / bytes of tiles used |',
    '|---|---|---|---|---|---|',
    ...b.sources.map(
      (r) =>
        `| ${r.source} | ${f(r.tilesPerSec)} | ${f(r.tiffTilesPerSec)} | ${f(r.ratio, 2)} (${r.ratios.map((x) => f(x, 2)).join(', ')}) | ${f(r.cpuMsPerTile, 2)} (${f(r.tiffCpuMsPerTile, 2)}) | ${r.fetchedBytes ? `${r.fetchedBytes} / ${r.tileBytes} = ${f(r.fetchedBytes / r.tileBytes!, 3)}` : ''} |`,
    ),
    '',
    `Cohort of ${b.cohort.slides} slides (0.5 and 0.25 MPP, TIFF and SVS; ${b.cohort.slidesInFlight} in flight): ${b.cohort.tiles} tiles in ${f(b.cohort.seconds)} s, ${f(b.cohort.slidesPerHour, 0)} slides/hour, ${f(b.cohort.tilesPerSec)} tiles/s against ${f(b.cohort.oneAtATimeTilesPerSec)} one slide at a time (ratio ${f(b.cohort.ratio, 2)}).`,
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const smoke = process.argv.includes('--smoke');
  const seconds = arg('seconds');
  const r = await benchSlide({
    smoke,
    concurrency: arg('concurrency') ? Number(arg('concurrency')) : undefined,
    repeats: arg('repeats') ? Number(arg('repeats')) : undefined,
    threads: arg('threads') ? Number(arg('threads')) : undefined,
    span: seconds ? { seconds: Number(seconds) } : undefined,
  });
  console.log(JSON.stringify(r, null, 2));
  console.log(slideMarkdown(r));
}
