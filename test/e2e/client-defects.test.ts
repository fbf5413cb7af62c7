// What a new user ran into with tile-infer, each as the command runs against the real service:
// two slides with one file name, a slide file changed since its run, a 72-dpi TIFF, a missing
// slide, a folder of tiles with a damaged PNG, a server that is not there, and one that goes away
// mid-run. Each of these failed on the client before these fixes.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import h5wasm from 'h5wasm/node';
import sharp from 'sharp';
import t from 'tap';
import { writeNullPackage } from '../../bench/null-models.js';
import { renderLevel0, writeSlide } from '../../tools/synthetic/slide.js';
import { startServer, waitFor, type TestServer } from '../helpers/server.js';
import { freePort, slideCommand, smallSlide as spec, summaryRows, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('client-defects');
const models = tempDir('defects-models');
const MODELS = [
  { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
  { name: 'null-224', path: writeNullPackage(models, 224), max_batch: 1 },
];
let port: number;
let server: TestServer;
const url = () => `http://127.0.0.1:${port}`;
const slide = (paths: string[], out: string, extra: string[] = []) =>
  slideCommand(paths, { model: 'null-224', out, server: url() }, extra);

async function features(path: string): Promise<{ coords: number[]; values: number[] }> {
  await h5wasm.ready;
  const f = new h5wasm.File(path, 'r');
  try {
    return {
      coords: Array.from((f.get('coords') as InstanceType<typeof h5wasm.Dataset>).value as Int32Array),
      values: Array.from((f.get('predictions') as InstanceType<typeof h5wasm.Dataset>).value as Float32Array),
    };
  } finally {
    f.close();
  }
}

t.before(async () => {
  port = await freePort();
  server = await startServer({ models: MODELS, config: { port } });
});
t.teardown(() => server.stop());

t.test('two slides with one file name: refused before any work, in one command or two', async (t) => {
  mkdirSync(join(dir, 'a'));
  mkdirSync(join(dir, 'b'));
  await writeSlide(join(dir, 'a/demo.tif'), spec(1));
  await writeSlide(join(dir, 'b/demo.tif'), spec(2, { islands: [{ cx: 200, cy: 200, rx: 150, ry: 150 }] }));
  const together = join(dir, 'together');
  const both = await tileInfer(slide([join(dir, 'a/demo.tif'), join(dir, 'b/demo.tif')], together));
  t.equal(both.code, 2, 'a usage error');
  t.match(both.stderr, /\[TILE_ERR_COHORT_NAME_CLASH\] .*a\/demo\.tif and .*b\/demo\.tif \(both "demo"\)/);
  t.notOk(existsSync(join(together, 'predictions_null-224')), 'nothing written');

  const out = join(dir, 'one-out');
  const first = await tileInfer(slide([join(dir, 'a/demo.tif')], out));
  t.equal(first.code, 0, first.stderr);
  const a = await features(join(out, 'predictions_null-224/demo.h5'));
  // null-224 names no genes: a column per value all the same (its header had 3 columns, rows 6).
  const csv = readFileSync(join(out, 'predictions_null-224/demo.csv'), 'utf8').trim().split('\n');
  t.equal(csv[0], 'patch_idx,x,y,output_0,output_1,output_2');
  t.ok(
    csv.every((line) => line.split(',').length === 6),
    'every row as long as the header',
  );
  const second = await tileInfer(slide([join(dir, 'b/demo.tif')], out));
  t.equal(second.code, 3, 'the second slide fails');
  const [row] = summaryRows(join(out, 'summary.csv'));
  t.equal(row.status, 'failed');
  t.match(row.reason, /\[TILE_ERR_COHORT_NAME_CLASH\] .*already holds for .*a\/demo\.tif, another slide/);
  t.same(await features(join(out, 'predictions_null-224/demo.h5')), a, "a's results untouched");
});

t.test("a slide changed since its run is run again: a journal never answers for another file's content", async (t) => {
  const path = join(dir, 'changing.tif');
  const out = join(dir, 'changing-out');
  await writeSlide(path, spec(3));
  t.equal((await tileInfer(slide([path], out))).code, 0);
  const before = await features(join(out, 'predictions_null-224/changing.h5'));
  // The same islands (the same tissue and grid) with other pixels.
  await writeSlide(path, spec(4));
  const run = await tileInfer(slide([path], out));
  t.equal(run.code, 0, run.stderr);
  const after = await features(join(out, 'predictions_null-224/changing.h5'));
  const fresh = join(dir, 'changing-fresh');
  t.equal((await tileInfer(slide([path], fresh))).code, 0);
  t.notSame(after.values, before.values, 'new results');
  t.same(
    after,
    await features(join(fresh, 'predictions_null-224/changing.h5')),
    'the same as a first run of the new file',
  );
});

t.test('a 72-dpi TIFF: refused naming the tag and --mpp, with no huge allocation; --mpp runs it', async (t) => {
  const path = join(dir, 'screen.tif');
  // 4096 x 3072 px: at 352.8 µm/px its 8 MPP overview would be 73 GB.
  await writeSlide(path, {
    ...spec(5),
    widthUm: 2048,
    heightUm: 1536,
    islands: [{ cx: 1024, cy: 768, rx: 300, ry: 200 }],
    resolution: { perUnit: 72, unit: 2 },
  });
  const out = join(dir, 'screen-out');
  const run = await tileInfer(slide([path], out));
  t.equal(run.code, 3, run.stderr);
  const [row] = summaryRows(join(out, 'summary.csv'));
  t.match(
    row.reason,
    /\[TILE_ERR_SLIDE_MPP_RANGE\] .*XResolution 72 pixels per inch \(ResolutionUnit 2\) gives 352\.8 µm\/px, outside what slide scanners produce.*--mpp/,
  );
  const given = await tileInfer(slide([path], out, ['--mpp', '0.5']));
  t.equal(given.code, 0, given.stderr);
  // Over an MPP the slide does record, --mpp wins and the summary row says so.
  const recorded = join(dir, 'recorded.tif');
  await writeSlide(recorded, spec(11));
  const over = join(dir, 'override-out');
  t.equal((await tileInfer(slide([recorded], over, ['--mpp', '0.25']))).code, 0);
  t.match(summaryRows(join(over, 'summary.csv')), [
    { status: 'done', reason: /warning: the --mpp 0\.25 µm\/px was used over the 0\.5 µm\/px the slide records/ },
  ]);
});

t.test('a missing slide reads "not found", and the others go on', async (t) => {
  const out = join(dir, 'missing-out');
  const present = join(dir, 'present.tif');
  await writeSlide(present, spec(6));
  const run = await tileInfer(slide([join(dir, 'nowhere.svs'), present], out));
  t.equal(run.code, 3);
  const rows = summaryRows(join(out, 'summary.csv'));
  t.match(rows[0], { status: 'failed', reason: /\[TILE_ERR_SLIDE_MISSING\] .*nowhere\.svs: not found/ });
  t.match(rows[1], { status: 'done' });
});

t.test(
  'tiles: a damaged PNG is recorded with its reason, the others are posted, the exit status says so',
  async (t) => {
    const folder = join(dir, 'tiles');
    mkdirSync(folder);
    const level0 = renderLevel0(spec(7));
    for (let k = 0; k < 4; k++) {
      const png = await sharp(level0.rgb, { raw: { width: level0.width, height: level0.height, channels: 3 } })
        .extract({ left: k * 224, top: 224, width: 224, height: 224 })
        .png()
        .toBuffer();
      writeFileSync(join(folder, `tile_x${k * 224}_y224.png`), k === 1 ? png.subarray(0, png.length - 300) : png);
    }
    writeFileSync(join(folder, 'tile_x9_y9.png'), 'not a png');
    const out = join(dir, 'tiles-out');
    const run = await tileInfer(['tiles', folder, '--model', 'null-224', '--out', out, '--server', url()]);
    t.equal(run.code, 3, run.stderr);
    const rows = summaryRows(join(out, 'summary.csv'));
    t.match(
      rows.find((r) => r.slide.endsWith('tile_x224_y224.png')),
      { status: 'failed', reason: /\[TILE_ERR_CLIENT_HTTP\] 422 from the service/ },
    );
    t.match(
      rows.find((r) => r.slide.endsWith('tile_x9_y9.png')),
      { status: 'failed', reason: /\[TILE_ERR_PLAN_NOT_PNG\] not a PNG tile: \[TILE_ERR_PNG_/ },
    );
    t.match(
      rows.find((r) => r.slide === folder),
      { status: 'done', tiles: 3 },
    );
    t.same(
      (await features(join(out, 'predictions_null-224/tiles.h5'))).coords,
      [0, 224, 448, 224, 672, 224],
      'the good tiles',
    );
    // A folder that is not there is the folder's coded failure (it was Node's bare ENOENT).
    const missing = join(dir, 'no-such-tiles');
    const none = await tileInfer([
      'tiles',
      missing,
      '--model',
      'null-224',
      '--out',
      join(dir, 'none-out'),
      '--server',
      url(),
    ]);
    t.equal(none.code, 3, none.stderr);
    t.match(summaryRows(join(dir, 'none-out', 'summary.csv')), [
      {
        slide: missing,
        status: 'failed',
        reason: /\[TILE_ERR_PLAN_NO_TILES\] \S+no-such-tiles: cannot be read: ENOENT/,
      },
    ]);
  },
);

t.test('a server that is not there: an error naming it within seconds', async (t) => {
  const closed = `http://127.0.0.1:${await freePort()}`;
  const path = join(dir, 'present.tif');
  const run = await tileInfer(
    ['slide', path, '--model', 'null-224', '--out', join(dir, 'nowhere-out'), '--server', closed],
    { timeoutMs: 60000 },
  );
  t.equal(run.code, 1, run.stderr);
  t.ok(run.seconds < 30, `${run.seconds.toFixed(1)} s`);
  t.match(run.stderr, new RegExp(`\\[TILE_ERR_CLIENT_UNREACHABLE\\] cannot reach ${closed} \\(ECONNREFUSED\\)`));
});

t.test(
  'a server that goes away mid-run: the progress shows the retries while it waits, then the run ends',
  async (t) => {
    const path = join(dir, 'long.tif');
    await writeSlide(path, {
      ...spec(8),
      widthUm: 1400,
      heightUm: 1000,
      islands: [{ cx: 700, cy: 500, rx: 600, ry: 420 }],
    });
    const out = join(dir, 'away-out');
    const journal = join(out, '.journal/long.null-224.jsonl');
    const lines = () => (existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').length - 2 : 0);
    const run = await tileInfer(slide([path], out, ['--concurrency', '2']), {
      onStart: () =>
        void waitFor(() => lines() >= 3, 60000).then(async () => {
          await server.stop();
          await new Promise((r) => setTimeout(r, 7000));
          server = await startServer({ models: MODELS, config: { port } });
        }),
    });
    t.equal(run.code, 0, run.stderr);
    t.match(
      run.stderr,
      /\d+ retries \(waiting: ECONNREFUSED from http:\/\/127\.0\.0\.1:\d+\)/,
      'a progress line while waiting',
    );
  },
);

t.test('two servers with two versions of the model: the slide fails, not a file of both', async (t) => {
  // The same model, its manifest changed: another package sha256, the same outputs.
  const other = tempDir('defects-other');
  const pkg = writeNullPackage(other, 224);
  const manifest = JSON.parse(readFileSync(join(pkg, 'manifest.json'), 'utf8'));
  writeFileSync(join(pkg, 'manifest.json'), JSON.stringify({ ...manifest, version: '2' }));
  const otherPort = await freePort();
  const second = await startServer({
    models: [MODELS[0], { ...MODELS[1], path: pkg }],
    config: { port: otherPort },
  });
  t.teardown(() => second.stop());
  const path = join(dir, 'versions.tif');
  await writeSlide(path, {
    ...spec(10),
    widthUm: 1400,
    heightUm: 1000,
    islands: [{ cx: 700, cy: 500, rx: 600, ry: 420 }],
  });
  const out = join(dir, 'versions-out');
  const run = await tileInfer(slide([path], out, ['--server', `http://127.0.0.1:${otherPort}`, '--concurrency', '8']));
  t.equal(run.code, 3, run.stderr);
  t.match(summaryRows(join(out, 'summary.csv')), [
    {
      status: 'failed',
      reason: /\[TILE_ERR_CLIENT_MODEL_CHANGED\] .*answered by model sha256 [0-9a-f]{64}, the run's is [0-9a-f]{64}/,
    },
  ]);
  t.notOk(existsSync(join(out, 'predictions_null-224/versions.h5')), 'no features file');
});

t.test('copies keep their name clash check honest: the same content moved resumes', async (t) => {
  const out = join(dir, 'moved-out');
  const first = join(dir, 'first');
  mkdirSync(first);
  await writeSlide(join(first, 'moved.tif'), spec(9));
  t.equal((await tileInfer(slide([join(first, 'moved.tif')], out))).code, 0);
  const second = join(dir, 'second');
  mkdirSync(second);
  copyFileSync(join(first, 'moved.tif'), join(second, 'moved.tif'));
  const run = await tileInfer(slide([join(second, 'moved.tif')], out));
  t.equal(run.code, 0, run.stderr);
  t.match(run.stderr, /finished before/, 'the same content: nothing to do');
});
