// tile-infer on generated slides against the real service: tissue found vs the known islands,
// coordinates (a tile's output equals posting that tile by hand), the HDF5 layout, the GeoJSON,
// kill -9 then rerun, and a service restarted mid-slide.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import h5wasm from 'h5wasm/node';
import sharp from 'sharp';
import t from 'tap';
import { truthMask, writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { startServer, waitFor, type TestServer } from '../helpers/server.js';
import { freePort, outputs, slideCommand, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

// A port of its own, kept for the run: the restarted service must come back where the command is
// talking.
let PORT = 0;
// One instance per model and batches of one: a tile's output does not depend on what it was
// batched with, so two runs can be compared byte for byte.
const MODELS = [
  { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
  { name: 'gene-expr', max_batch: 1 },
];
const startService = () => startServer({ models: MODELS, config: { port: PORT } });

const dir = tempDir('tile-infer');
const TIFF: SlideSpec = {
  widthUm: 1600,
  heightUm: 1200,
  mpp: 0.5,
  seed: 11,
  format: 'tiff',
  islands: [
    { cx: 480, cy: 520, rx: 330, ry: 260 },
    { cx: 1180, cy: 700, rx: 260, ry: 330 },
  ],
};
const SVS: SlideSpec = {
  widthUm: 1200,
  heightUm: 900,
  mpp: 0.25,
  seed: 12,
  format: 'svs',
  islands: [{ cx: 600, cy: 450, rx: 380, ry: 280 }],
};
const tiffPath = join(dir, 'tiff-slide.tif');
const svsPath = join(dir, 'svs-slide.svs');

const slideArgs = (slide: string, out: string, extra: string[] = []) =>
  slideCommand([slide], { model: 'gene-expr', out, server: `http://127.0.0.1:${PORT}` }, [
    '--heatmap',
    'ESR1',
    ...extra,
  ]);

const journalLines = (out: string) => {
  const path = join(out, '.journal', 'tiff-slide.gene-expr.jsonl');
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').length - 2 : 0;
};

/** IoU of the written tissue mask with the islands, at 8 MPP (the sizes must agree). */
async function tissueIoU(maskPng: string, spec: SlideSpec): Promise<number> {
  const { data, info } = await sharp(maskPng).extractChannel(0).raw().toBuffer({ resolveWithObject: true });
  const truth = truthMask(spec, 8);
  if (info.width !== truth.width || info.height !== truth.height)
    throw new Error(`mask ${info.width}x${info.height}, islands ${truth.width}x${truth.height}`);
  let inter = 0;
  let union = 0;
  truth.mask.forEach((v, i) => {
    const found = data[i] > 127 ? 1 : 0;
    inter += v & found;
    union += v | found;
  });
  return inter / union;
}

let server: TestServer;
const reference = join(dir, 'reference');

t.before(async () => {
  PORT = await freePort();
  await writeSlide(tiffPath, TIFF);
  await writeSlide(svsPath, SVS);
  server = await startService();
});
t.teardown(() => server.stop());

t.test('a pyramidal TIFF: tissue, grid, HDF5, GeoJSON, pictures', async (t) => {
  const run = await tileInfer(slideArgs(tiffPath, reference));
  t.equal(run.code, 0, run.stderr);

  // Tissue found vs the islands, at 8 MPP.
  const truth = truthMask(TIFF, 8);
  const iou = await tissueIoU(join(reference, 'tissue/tiff-slide.png'), TIFF);
  t.ok(iou > 0.85, `tissue IoU ${iou.toFixed(3)} > 0.85`);

  // The HDF5 layout as CLAM/TRIDENT read it.
  const meta = (await (await server.get('/api/metadata/gene-expr')).json()) as {
    sha256: string;
    output_genes: string[];
    embedding_dim: number;
  };
  await h5wasm.ready;
  const features = new h5wasm.File(join(reference, 'features_gene-expr/tiff-slide.h5'), 'r');
  const feats = features.get('features') as InstanceType<typeof h5wasm.Dataset>;
  const coords = features.get('coords') as InstanceType<typeof h5wasm.Dataset>;
  const n = coords.shape![0];
  t.ok(n > 20, `${n} tiles`);
  t.same(feats.shape, [n, meta.embedding_dim]);
  t.equal(feats.dtype, '<f');
  t.same(coords.shape, [n, 2]);
  t.equal(coords.dtype, '<i');
  t.equal(coords.attrs.patch_size.value, 224);
  t.equal(coords.attrs.patch_size_level0.value, 224, '0.5 MPP tiles on a 0.5 MPP slide');
  t.equal(coords.attrs.level0_mpp.value, 0.5, 'MPP from the resolution tags');
  t.equal(features.attrs.model.value, 'gene-expr');
  t.equal(features.attrs.model_sha256.value, meta.sha256);
  const coordValues = coords.value as Int32Array;
  const featureValues = feats.value as Float32Array;
  // Every tile lies on the 224-pixel grid.
  for (let k = 0; k < n; k++) t.equal((coordValues[k * 2] % 224) + (coordValues[k * 2 + 1] % 224), 0);
  features.close();

  const predictions = new h5wasm.File(join(reference, 'predictions_gene-expr/tiff-slide.h5'), 'r');
  t.same((predictions.get('genes') as InstanceType<typeof h5wasm.Dataset>).value, meta.output_genes);
  t.same((predictions.get('predictions') as InstanceType<typeof h5wasm.Dataset>).shape, [n, meta.output_genes.length]);
  const predictionValues = (predictions.get('predictions') as InstanceType<typeof h5wasm.Dataset>)
    .value as Float32Array;
  predictions.close();
  const csv = readFileSync(join(reference, 'predictions_gene-expr/tiff-slide.csv'), 'utf8').trim().split('\n');
  t.equal(csv.length, n + 1);
  t.equal(csv[0], ['patch_idx', 'x', 'y', ...meta.output_genes].join(','));

  // Coordinates: the tile at a row's coords, cut by libvips' own TIFF reader and posted by hand,
  // gives that row's embedding and prediction.
  for (const k of [0, Math.floor(n / 2), n - 1]) {
    const [x, y] = [coordValues[k * 2], coordValues[k * 2 + 1]];
    const png = await sharp(tiffPath, { page: 0 })
      .extract({ left: x, top: y, width: 224, height: 224 })
      .png()
      .toBuffer();
    const res = await server.post('/api/predict/gene-expr?mode=prediction_with_embedding', {
      image_data: png.toString('base64'),
      slide_name: 'by-hand',
      x,
      y,
      width: 224,
      height: 224,
      patch_idx: 0,
      resolution: 0.5,
    });
    const body = (await res.json()) as { output: number[]; embedding: number[] };
    t.same(
      Array.from(featureValues.subarray(k * meta.embedding_dim, (k + 1) * meta.embedding_dim)),
      Array.from(Float32Array.from(body.embedding)),
      `row ${k} embedding`,
    );
    t.same(
      Array.from(predictionValues.subarray(k * 21, (k + 1) * 21)),
      Array.from(Float32Array.from(body.output)),
      `row ${k} prediction`,
    );
  }

  // GeoJSON: one polygon per island, closed rings, level-0 coordinates inside the slide, area
  // close to the islands'.
  const geo = JSON.parse(readFileSync(join(reference, 'tissue/tiff-slide.geojson'), 'utf8'));
  t.equal(geo.type, 'FeatureCollection');
  t.equal(geo.features.length, TIFF.islands.length, 'one polygon per island');
  const shoelace = (ring: number[][]) =>
    ring.slice(1).reduce((s, p, i) => s + ring[i][0] * p[1] - p[0] * ring[i][1], 0) / 2;
  let area = 0;
  for (const f of geo.features) {
    t.equal(f.type, 'Feature');
    t.equal(f.geometry.type, 'Polygon');
    t.equal(f.properties.objectType, 'annotation');
    for (const ring of f.geometry.coordinates as number[][][]) {
      t.ok(ring.length >= 4, 'a ring has at least 4 positions');
      t.same(ring[0], ring[ring.length - 1], 'rings are closed');
      t.ok(
        ring.every(
          ([x, y]) => Number.isInteger(x) && Number.isInteger(y) && x >= 0 && y >= 0 && x <= 3200 && y <= 2400,
        ),
        'level-0 pixels inside the slide',
      );
    }
    area += Math.abs(shoelace(f.geometry.coordinates[0]));
  }
  const islandsArea = TIFF.islands.reduce((s, i) => s + Math.PI * (i.rx / TIFF.mpp) * (i.ry / TIFF.mpp), 0);
  t.ok(Math.abs(area / islandsArea - 1) < 0.15, `polygon area ${(area / islandsArea).toFixed(3)} of the islands'`);

  for (const picture of ['thumbnails/tiff-slide.png', 'heatmaps_gene-expr/tiff-slide_ESR1.png']) {
    const m = await sharp(join(reference, picture)).metadata();
    t.same([m.width, m.height], [truth.width, truth.height], `${picture} at 8 MPP`);
  }
});

t.test('tiles: a folder of PNG tiles gives the same features as the slide', async (t) => {
  await h5wasm.ready;
  const slideFile = new h5wasm.File(join(reference, 'features_gene-expr/tiff-slide.h5'), 'r');
  const coords = (slideFile.get('coords') as InstanceType<typeof h5wasm.Dataset>).value as Int32Array;
  const features = (slideFile.get('features') as InstanceType<typeof h5wasm.Dataset>).value as Float32Array;
  slideFile.close();
  const folder = join(dir, 'tiles-of-slide');
  mkdirSync(folder);
  const rows = [0, 3, 7];
  for (const k of rows) {
    const [x, y] = [coords[k * 2], coords[k * 2 + 1]];
    await sharp(tiffPath, { page: 0 })
      .extract({ left: x, top: y, width: 224, height: 224 })
      .png()
      .toFile(join(folder, `tile_x${String(x).padStart(5, '0')}_y${y}.png`));
  }
  const out = join(dir, 'tiles-out');
  const run = await tileInfer([
    'tiles',
    folder,
    '--model',
    'gene-expr',
    '--out',
    out,
    '--server',
    `http://127.0.0.1:${PORT}`,
  ]);
  t.equal(run.code, 0, run.stderr);
  const file = new h5wasm.File(join(out, 'features_gene-expr/tiles-of-slide.h5'), 'r');
  const got = (file.get('features') as InstanceType<typeof h5wasm.Dataset>).value as Float32Array;
  const gotCoords = Array.from((file.get('coords') as InstanceType<typeof h5wasm.Dataset>).value as Int32Array);
  file.close();
  const dim = got.length / rows.length;
  // Files are taken in name order: x ascending here, as the zero-padded names sort.
  const order = [...rows].sort((a, b) => coords[a * 2] - coords[b * 2] || coords[a * 2 + 1] - coords[b * 2 + 1]);
  t.same(
    gotCoords,
    order.flatMap((k) => [coords[k * 2], coords[k * 2 + 1]]),
    'coordinates from the names',
  );
  order.forEach((k, i) =>
    t.same(
      Array.from(got.subarray(i * dim, (i + 1) * dim)),
      Array.from(features.subarray(k * dim, (k + 1) * dim)),
      `row ${k}`,
    ),
  );
});

t.test('an Aperio SVS: MPP from the description, level 0 reduced to 0.5 MPP', async (t) => {
  const out = join(dir, 'svs');
  const run = await tileInfer(slideArgs(svsPath, out));
  t.equal(run.code, 0, run.stderr);
  await h5wasm.ready;
  const file = new h5wasm.File(join(out, 'features_gene-expr/svs-slide.h5'), 'r');
  const coords = file.get('coords') as InstanceType<typeof h5wasm.Dataset>;
  t.equal(coords.attrs.level0_mpp.value, 0.25);
  t.equal(coords.attrs.patch_size_level0.value, 448);
  t.ok(coords.shape![0] >= 8, `${coords.shape![0]} tiles`);
  file.close();
  const iou = await tissueIoU(join(out, 'tissue/svs-slide.png'), SVS);
  t.ok(iou > 0.85, `tissue IoU ${iou.toFixed(3)} > 0.85`);
});

t.test('kill -9 mid-slide, then rerun: the same files as an uninterrupted run', async (t) => {
  const out = join(dir, 'killed');
  const killed = await tileInfer(slideArgs(tiffPath, out), {
    onStart: (proc) => {
      void waitFor(() => journalLines(out) >= 8, 60000).then(() => proc.kill('SIGKILL'));
    },
  });
  t.equal(killed.code, null, 'killed');
  t.ok(journalLines(out) >= 8, `${journalLines(out)} tiles done before the kill`);
  t.notOk(existsSync(join(out, 'features_gene-expr/tiff-slide.h5')), 'killed before the end');
  const expected = outputs(reference);
  const rerun = await tileInfer(slideArgs(tiffPath, out));
  t.equal(rerun.code, 0, rerun.stderr);
  const got = outputs(out);
  t.same([...got.keys()].sort(), [...expected.keys()].sort());
  for (const [name, bytes] of expected) t.ok(bytes.equals(got.get(name)!), `${name} identical`);
});

t.test('a service restarted mid-slide costs only retries', async (t) => {
  const out = join(dir, 'restarted');
  const run = await tileInfer(slideArgs(tiffPath, out), {
    onStart: () =>
      void waitFor(() => journalLines(out) >= 5, 60000).then(async () => {
        await server.stop();
        server = await startService();
      }),
  });
  t.equal(run.code, 0, run.stderr);
  const retries = Number(/, (\d+) retries; wrote/.exec(run.stderr)?.[1]);
  t.ok(retries > 0, `${retries} retries`);
  const expected = outputs(reference);
  const got = outputs(out);
  for (const [name, bytes] of expected) t.ok(bytes.equals(got.get(name)!), `${name} identical`);
});
