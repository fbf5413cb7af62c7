// The slide reader on small generated slides (no service): pyramid levels, MPP from the TIFF
// resolution tags and from the Aperio description, regions and tiles against the pixels that
// were encoded;
// the tile grid, the results journal after a torn write, and tile-folder coordinates.
import { appendFileSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import t from 'tap';
import { tileGrid, upsampleWarning } from '../src/client/pipeline/grid.js';
import { Journal } from '../src/client/pipeline/journal.js';
import { Summary } from '../src/client/pipeline/cohort.js';
import { recordFailure } from '../src/client/pipeline/run-cohort.js';
import { lockOutput } from '../src/client/pipeline/out-lock.js';
import { coordsFromName, readPlan } from '../src/client/pipeline/process-tiles.js';
import { ReaderPool } from '../src/client/pipeline/reader-pool.js';
import { tileBodies } from '../src/client/pipeline/tile-reader.js';
import { bestLevel } from '../src/client/slide/region.js';
import { BLOCK, ByteSource } from '../src/client/slide/remote/source.js';
import { aperioMpp, TiffSlide } from '../src/client/slide/tiff-slide.js';
import { downsample, writeSlide, type SlideSpec } from '../tools/synthetic/slide.js';
import { tempDir } from '../tools/temp-dir.js';

const dir = tempDir('slide-reader');
const pool = new ReaderPool(1);
t.teardown(() => pool.close());
const spec = (format: 'tiff' | 'svs', mpp: number): SlideSpec => ({
  widthUm: 640,
  heightUm: 400,
  mpp,
  seed: 3,
  format,
  islands: [{ cx: 300, cy: 200, rx: 200, ry: 120 }],
});

for (const [format, mpp] of [
  ['tiff', 0.5],
  ['svs', 0.25],
] as const) {
  t.test(`${format}: levels, MPP and regions`, async (t) => {
    const path = join(dir, `s.${format}`);
    const raster = await writeSlide(path, spec(format, mpp));
    const slide = await TiffSlide.open(path);
    t.teardown(() => slide.close());
    t.equal(slide.mpp, mpp, 'MPP from the slide metadata');
    t.same(
      slide.levels.map((l) => l.downsample),
      [1, 4, 16],
      'the SVS thumbnail is not a level',
    );
    t.same([slide.levels[0].width, slide.levels[0].height], [raster.width, raster.height]);
    // A region across TIFF tile borders, and one past the right edge (white there).
    const [x, y, w, h] = [200, 190, 300, 130];
    const region = await slide.readRegion(0, x, y, w, h);
    let diff = 0;
    for (let r = 0; r < h; r++)
      for (let c = 0; c < w * 3; c++)
        diff += Math.abs(region[r * w * 3 + c] - raster.rgb[((y + r) * raster.width + x) * 3 + c]);
    t.ok(diff / (w * h * 3) < 3, `mean difference to the encoded pixels ${(diff / (w * h * 3)).toFixed(2)} (JPEG)`);
    const edge = await slide.readRegion(0, raster.width - 10, 0, 20, 1);
    t.same(Array.from(edge.subarray(30)), new Array(30).fill(255), 'white past the edge');
    // 0.5 MPP tiles: level 0 as is on the TIFF, reduced 2x from level 0 on the SVS.
    t.equal(bestLevel(slide, 0.5 / mpp), 0);
    t.equal(bestLevel(slide, 8 / mpp), 2, 'the coarsest level not coarser than asked');
    t.equal(bestLevel(slide, 3.9), 0, 'level 1 (4x) would be coarser');
    // A 0.5 MPP tile (the SVS's level 0 reduced 2x) against the encoded pixels box-reduced 2x.
    const extent = (0.5 * 224) / mpp;
    const tiles = [{ idx: 0, x: extent, y: 0 }];
    let rgb = Buffer.alloc(0);
    const fields = () => ({ slide_name: 's', x: 0, y: 0, width: 224, height: 224, patch_idx: 0 });
    for await (const { body } of tileBodies({
      pool,
      type: 'application/json',
      slide,
      tiles,
      extent,
      size: 224,
      fields,
    })) {
      rgb = await sharp(Buffer.from(JSON.parse(body.bytes.toString()).image_data, 'base64'))
        .raw()
        .toBuffer();
    }
    const expected = mpp === 0.5 ? raster : downsample(raster, 2);
    let tileDiff = 0;
    for (let r = 0; r < 224; r++)
      for (let c = 0; c < 224 * 3; c++)
        tileDiff += Math.abs(rgb[r * 224 * 3 + c] - expected.rgb[(r * expected.width + 224) * 3 + c]);
    t.ok(tileDiff / (224 * 224 * 3) < 4, `tile at 0.5 MPP: mean difference ${(tileDiff / (224 * 224 * 3)).toFixed(2)}`);
  });
}

t.test('raw bodies of small tiles (under 4 KiB, where Node pools buffers) reach the main thread', async (t) => {
  const path = join(dir, 'small-tiles.tiff');
  const raster = await writeSlide(path, spec('tiff', 0.5));
  const slide = await TiffSlide.open(path);
  t.teardown(() => slide.close());
  // 16x16 tiles, 768 bytes each, none given back: some start a fresh slab of the reader thread's
  // pool, which Node 22 and 24 refuse to transfer (DataCloneError; Node 20 copies it).
  const tiles = Array.from({ length: 400 }, (_, idx) => ({ idx, x: (idx % 40) * 16, y: Math.floor(idx / 40) * 16 }));
  let same = 0;
  const fields = (t: { idx: number; x: number; y: number }) => ({
    slide_name: 's',
    x: t.x,
    y: t.y,
    width: 16,
    height: 16,
    patch_idx: t.idx,
  });
  const type = 'application/octet-stream';
  for await (const { tile, body } of tileBodies({ pool, type, slide, tiles, extent: 16, size: 16, fields })) {
    let diff = 0;
    for (let r = 0; r < 16; r++)
      for (let c = 0; c < 48; c++)
        diff += Math.abs(body.bytes[r * 48 + c] - raster.rgb[((tile.y + r) * raster.width + tile.x) * 3 + c]);
    if (body.bytes.length === 768 && diff / 768 < 4) same++;
  }
  t.equal(same, tiles.length, `every tile, its pixels (Node ${process.version})`);
});

t.test('a pool closed under tasks still running waits for them: no "Unexpected message from Worker"', async (t) => {
  // As tile-infer closes its pool after a slide failed with bodies tasks in flight: piscina's
  // 'error' event for their late results, unheard, stopped the process (e2e client-defects).
  const path = join(dir, 'small-tiles.tiff');
  const slide = await TiffSlide.open(path);
  t.teardown(() => slide.close());
  const tiles = Array.from({ length: 400 }, (_, idx) => ({ idx, x: (idx % 40) * 16, y: Math.floor(idx / 40) * 16 }));
  const fields = () => ({ slide_name: 's', x: 0, y: 0, width: 16, height: 16, patch_idx: 0 });
  for (let round = 0; round < 20; round++) {
    const own = new ReaderPool(2);
    const bodies = tileBodies({
      pool: own,
      type: 'application/octet-stream',
      slide,
      tiles,
      extent: 16,
      size: 16,
      fields,
    });
    await bodies.next(); // the first body; the rest left running, as a failed slide leaves them
    await own.close();
  }
  t.pass('20 pools closed under running tasks, the process unharmed');
});

t.test('lossless tiled TIFFs (deflate, LZW with a predictor): regions are the pixels, exactly', async (t) => {
  const [width, height] = [600, 420];
  const rgb = Buffer.from(Array.from({ length: width * height * 3 }, (_, i) => (i * 7919 + (i >> 9)) % 251));
  for (const compression of ['deflate', 'lzw'] as const) {
    const path = join(dir, `lossless-${compression}.tif`);
    await sharp(rgb, { raw: { width, height, channels: 3 } })
      .tiff({ tile: true, tileWidth: 128, tileHeight: 128, compression, predictor: 'horizontal', pyramid: true })
      .toFile(path);
    const slide = await TiffSlide.open(path);
    t.teardown(() => slide.close());
    t.ok(slide.levels.length >= 2, `${compression}: a pyramid`);
    const [x, y, w, h] = [100, 250, 520, 200]; // across tile borders and past both far edges
    const region = await slide.readRegion(0, x, y, w, h);
    let same = true;
    for (let r = 0; r < h; r++) {
      for (let c = 0; c < w; c++) {
        const inside = x + c < width && y + r < height;
        for (let k = 0; k < 3; k++)
          same &&= region[(r * w + c) * 3 + k] === (inside ? rgb[((y + r) * width + x + c) * 3 + k] : 255);
      }
    }
    t.ok(same, `${compression}: the encoded pixels, white past the edges`);
  }
});

t.test('Aperio MPP from the description', async (t) => {
  t.equal(aperioMpp('Aperio Image Library v10 |AppMag = 40|MPP = 0.2520|Left = 1'), 0.252);
  t.equal(aperioMpp('no mpp here'), null);
});

t.test('the tile grid keeps whole tiles with enough tissue, row-major', async (t) => {
  // A 10x10 mask at 8 MPP (16 level-0 pixels per mask pixel at 0.5 MPP); tissue in the left half.
  const mask = { width: 10, height: 10, mask: Uint8Array.from({ length: 100 }, (_, i) => (i % 10 < 5 ? 1 : 0)) };
  const grid = tileGrid({ width: 160, height: 160, mpp0: 0.5, tileSize: 32, tileMpp: 0.5, mask, minTissue: 0.6 });
  t.equal(grid.extent, 32);
  t.same(
    grid.tiles.slice(0, 3).map((g) => [g.idx, g.x, g.y]),
    [
      [0, 0, 0],
      [1, 32, 0],
      [2, 0, 32],
    ],
  );
  t.ok(grid.tiles.every((g) => g.x < 64 && g.tissue === 1));
  t.equal(grid.tiles.length, 2 * 5, 'the third column has half tissue: under 0.6');
});

t.test('a slide coarser than the model is said, past the few percent scanners vary by', async (t) => {
  t.equal(upsampleWarning(0.2527, 0.25), null, "a 40x scanner's 0.2527 µm/px for a 40x model");
  t.equal(upsampleWarning(0.25, 0.5), null, 'finer: reduced, as always');
  t.equal(
    upsampleWarning(2, 0.5),
    "warning: the slide's finest level is 2 µm/px, coarser than the model's 0.5 µm/px: its tiles were upsampled 4x from it (is the slide's finest level missing, or the model meant for another magnification?)",
  );
});

t.test('a torn last line of the journal is dropped; another plan starts afresh', async (t) => {
  const path = join(dir, 'j.jsonl');
  const plan = { model: 'm', tiles: 3 };
  const first = Journal.open(path, plan, { tiles: 3, output: 2 });
  first.append({ idx: 0, output: [1, 2] });
  first.append({ idx: 1, output: [3, 4] });
  first.close();
  appendFileSync(path, '{"idx":2,"outp');
  const again = Journal.open(path, plan, { tiles: 3, output: 2 });
  t.same([...again.done.keys()], [0, 1]);
  again.append({ idx: 2, output: [5, 6] });
  again.close();
  t.same(
    readFileSync(path, 'utf8')
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => JSON.parse(l).idx),
    [0, 1, 2],
    'the torn line is gone',
  );
  const other = Journal.open(path, { ...plan, tiles: 4 }, { tiles: 4, output: 2 });
  t.equal(other.done.size, 0);
  other.close();
});

t.test('a result without its output is not kept, and a journal line without one is named', async (t) => {
  const path = join(dir, 'no-output.jsonl');
  const plan = { model: 'm', tiles: 2 };
  const journal = Journal.open(path, plan, { tiles: 2 });
  t.throws(() => journal.append({ idx: 0 } as never), {
    code: 'TILE_ERR_OUTPUT_JOURNAL',
    message: /answer for tile 0: output is not a list of numbers; not kept/,
  });
  const both = Journal.open(join(dir, 'both.jsonl'), plan, { tiles: 2, withEmbedding: true });
  t.throws(() => both.append({ idx: 0, output: [1] }), { message: /tile 0: embedding is not a list of numbers/ });
  both.close();
  journal.append({ idx: 1, output: [1, 2] });
  journal.close();
  // A line an earlier version kept.
  appendFileSync(path, '{"idx":0}\n');
  t.throws(() => Journal.open(path, plan, { tiles: 2 }), {
    code: 'TILE_ERR_OUTPUT_JOURNAL',
    message: /line 3: tile 0: output is not a list of numbers; delete the file to redo the slide/,
  });
});

t.test('a failure without a code is recorded as unexpected, with its message', async (t) => {
  const path = join(dir, 'summary.csv');
  const summary = new Summary(path, () => 0);
  const lines: string[] = [];
  recordFailure(
    summary,
    { slideDone: (line) => lines.push(line) },
    'a.dcm',
    performance.now(),
    new TypeError('sets.map is not a function'),
  );
  t.same(lines, ['a.dcm: failed: [TILE_ERR_CLIENT_UNEXPECTED] sets.map is not a function']);
  t.match(
    readFileSync(path, 'utf8'),
    /a\.dcm,failed,0,[\d.]+,\[TILE_ERR_CLIENT_UNEXPECTED\] sets\.map is not a function/,
  );
});

t.test('tile coordinates from file names or a CSV plan', async (t) => {
  t.same(coordsFromName('slide_x1024_y2048.png'), { x: 1024, y: 2048 });
  t.same(coordsFromName('tile_448_896.png'), { x: 448, y: 896 });
  t.equal(coordsFromName('tile.png'), null);
  t.same(readPlan('file,x,y\na.png,0,224\n', 'plan.csv'), [{ file: 'a.png', x: 0, y: 224 }]);
  t.throws(() => readPlan('name,x,y\na.png,0,0\n', 'plan.csv'), {
    code: 'TILE_ERR_PLAN_HEADER',
    message: /the header must name file, x and y/,
  });
  t.throws(() => readPlan('file,x,y\na.png,0,left\n', 'plan.csv'), {
    code: 'TILE_ERR_PLAN_COORDS',
    message: /line 2: x and y must be integers/,
  });
});

t.test('the output lock appears whole: a second run names its holder, and nothing else is left', async (t) => {
  const out = tempDir('out-lock');
  const lock = lockOutput(out, null, () => {});
  t.throws(() => lockOutput(out, null, () => {}), {
    code: 'TILE_ERR_OUTPUT_LOCKED',
    message: new RegExp(`pid ${process.pid} on `),
  });
  t.same(readdirSync(out), ['tile-infer.lock'], 'no file it was made from');
  lock.release();
  t.same(readdirSync(out), []);
});

t.test('shards of one sharding share an --out; a run of all the slides or another sharding does not', async (t) => {
  const out = tempDir('out-shards');
  const first = lockOutput(out, { index: 0, count: 2, from: '--shard' }, () => {});
  const second = lockOutput(out, { index: 1, count: 2, from: '--shard' }, () => {});
  for (const shard of [null, { index: 0, count: 3, from: '--shard' }])
    t.throws(() => lockOutput(out, shard, () => {}), {
      code: 'TILE_ERR_OUTPUT_LOCKED',
      message: /whose slides may be this run's \(pid \d+ on .*tile-infer\.\d-of-2\.lock\)/,
    });
  t.same(
    readdirSync(out).sort(),
    ['tile-infer.0-of-2.lock', 'tile-infer.1-of-2.lock'],
    "the refused runs' locks are gone",
  );
  first.release();
  second.release();
  lockOutput(out, null, () => {}).release();
});

t.test('a remote source reads ranges of 0 bytes as empty, and never asks a server for one', async (t) => {
  const asked: [number, number][] = [];
  const source = new ByteSource({
    url: 'https://example.org/slide.svs',
    size: 10_000_000,
    etag: '"1"',
    first: new Uint8Array(BLOCK),
    fetch: async (offset, length) => {
      asked.push([offset, length]);
      return new Uint8Array(length).fill(7);
    },
    close: () => {},
  });
  const [empty, tile] = await source.readRanges([
    [5_000_000, 0],
    [8_000_000, 100],
  ]);
  t.equal(empty.length, 0);
  t.equal(tile.length, 100);
  t.same(asked, [[8_000_000, 100]], 'one request, for the tile');
});
