// tile-infer over a cohort against the real service: a TRIDENT-style manifest with one corrupt
// slide (recorded as failed with its reason, the others done), a rerun that skips what finished,
// three shards (explicit, Slurm's and Kubernetes' environment) that together run each slide once
// with the same files, and kill -9 mid-cohort then the same command: the same files as an
// uninterrupted run.
import { mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeNullPackage } from '../../bench/null-models.js';
import { writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { startServer, waitFor, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, summaryRows, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('cohort');
const spec = (format: 'tiff' | 'svs', mpp: number, seed: number): SlideSpec => ({
  widthUm: 700,
  heightUm: 520,
  mpp,
  seed,
  format,
  islands: [{ cx: 350, cy: 260, rx: 280, ry: 200 }],
});
const SLIDES = [
  { wsi: 'site-a/c1.tif', spec: spec('tiff', 0.5, 1) },
  { wsi: 'site-a/c2.svs', spec: spec('svs', 0.25, 2) },
  { wsi: 'site-b/c3.tif', spec: spec('tiff', 0.5, 3), mpp: 0.5 },
  { wsi: 'site-b/c4.svs', spec: spec('svs', 0.25, 4) },
  { wsi: 'site-b/c5.tif', spec: spec('tiff', 0.25, 5) },
];
const CORRUPT = 'site-a/broken.tif';
const manifest = join(dir, 'manifest', 'cohort.csv');
// One instance, batches of one: a tile's output does not depend on its batch, so runs compare
// byte for byte.
let server: TestServer;
const args = (out: string, extra: string[] = []) =>
  slideCommand([manifest], { model: 'null-224', out, server: server.url }, extra);

t.before(async () => {
  mkdirSync(join(dir, 'manifest'));
  for (const s of SLIDES) {
    mkdirSync(join(dir, 'manifest', s.wsi, '..'), { recursive: true });
    await writeSlide(join(dir, 'manifest', s.wsi), s.spec);
  }
  writeFileSync(join(dir, 'manifest', CORRUPT), Buffer.from('II*\0 this is not a slide'));
  // The corrupt slide third: the cohort goes on past it.
  const rows = SLIDES.map((s) => `${s.wsi},${s.mpp ?? ''}`);
  rows.splice(2, 0, `${CORRUPT},`);
  writeFileSync(manifest, `wsi,mpp\n${rows.join('\n')}\n`);
  const models = tempDir('cohort-models');
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'null-224', path: writeNullPackage(models, 224), max_batch: 1 },
    ],
  });
});
t.teardown(() => server.stop());

const reference = join(dir, 'reference');

t.test('a manifest with a corrupt slide: it is recorded as failed with its reason, the others are done', async (t) => {
  const run = await tileInfer(args(reference));
  t.equal(run.code, 3, `exit 3 when some slides failed\n${run.stderr}`);
  const rows = summaryRows(join(reference, 'summary.csv'));
  t.same(
    rows.map((r) => r.slide),
    [SLIDES[0].wsi, SLIDES[1].wsi, CORRUPT, ...SLIDES.slice(2).map((s) => s.wsi)],
    'one row per slide, in manifest order',
  );
  const broken = rows.find((r) => r.slide === CORRUPT)!;
  t.equal(broken.status, 'failed');
  t.match(
    broken.reason,
    /\[TILE_ERR_SLIDE_TRUNCATED\] .*broken\.tif: the file is cut short: it is \d+ bytes, and directory 0 starts at byte \d+/,
  );
  t.match(
    run.stderr,
    /site-a\/broken\.tif: failed: \[TILE_ERR_SLIDE_TRUNCATED\] /,
    'its progress line: the code first',
  );
  for (const r of rows.filter((r) => r.slide !== CORRUPT)) {
    t.equal(r.status, 'done', r.slide);
    t.ok(r.tiles > 5, `${r.slide}: ${r.tiles} tiles`);
  }
  const files = [...outputs(reference).keys()];
  for (const stem of ['c1', 'c2', 'c3', 'c4', 'c5'])
    t.ok(files.includes(`predictions_null-224/${stem}.h5`), `${stem}.h5 written`);
  t.notOk(
    files.some((f) => f.includes('broken')),
    'nothing written for the corrupt slide',
  );
});

t.test('a rerun skips the finished slides without working on them again', async (t) => {
  const before = statSync(join(reference, 'predictions_null-224/c1.h5')).mtimeMs;
  const run = await tileInfer(args(reference));
  t.equal(run.code, 3, 'the corrupt slide still fails');
  t.equal(run.stderr.match(/finished before \(\d+ tiles\); skipped/g)?.length, SLIDES.length, run.stderr);
  t.equal(statSync(join(reference, 'predictions_null-224/c1.h5')).mtimeMs, before, 'outputs untouched');
  t.same(
    summaryRows(join(reference, 'summary.csv')).map((r) => r.status),
    ['done', 'done', 'failed', 'done', 'done', 'done'],
  );
});

t.test(
  'three shards (explicit, Slurm array, Kubernetes Indexed Job) run each slide once, with the same files',
  async (t) => {
    const out = join(dir, 'sharded');
    const runs = await Promise.all([
      tileInfer(args(out, ['--shard', '0/3', '--slides-in-flight', '1'])),
      tileInfer(args(out, ['--slides-in-flight', '1']), {
        env: { SLURM_ARRAY_TASK_ID: '11', SLURM_ARRAY_TASK_MIN: '10', SLURM_ARRAY_TASK_COUNT: '3' },
      }),
      tileInfer(args(out, ['--shards', '3', '--slides-in-flight', '1']), { env: { JOB_COMPLETION_INDEX: '2' } }),
    ]);
    runs.forEach((r, i) => t.match(r.stderr, new RegExp(`shard ${i} of 3`), `shard ${i}: ${r.stderr}`));
    const summaries = readdirSync(out)
      .filter((f) => f.startsWith('summary'))
      .sort();
    t.same(
      summaries,
      ['summary.0-of-3.csv', 'summary.1-of-3.csv', 'summary.2-of-3.csv'],
      'one summary per shard, none shared',
    );
    const slides = summaries.flatMap((f) => summaryRows(join(out, f)).map((r) => r.slide));
    t.same(
      [...slides].sort(),
      [...SLIDES.map((s) => s.wsi), CORRUPT].sort(),
      'together: each slide of the cohort once',
    );
    const expected = outputs(reference);
    const got = outputs(out);
    t.same([...got.keys()].sort(), [...expected.keys()].sort());
    for (const [name, bytes] of expected) t.ok(bytes.equals(got.get(name)!), `${name} identical`);
  },
);

t.test('kill -9 mid-cohort, then the same command: the files of an uninterrupted run', async (t) => {
  const out = join(dir, 'killed');
  const journalled = () => {
    try {
      return readdirSync(join(out, '.journal')).filter((f) => f.endsWith('.done.json')).length;
    } catch {
      return 0;
    }
  };
  const killed = await tileInfer(args(out), {
    onStart: (proc) => void waitFor(() => journalled() >= 2, 120000).then(() => proc.kill('SIGKILL')),
  });
  t.equal(killed.code, null, 'killed');
  t.ok(journalled() < SLIDES.length, `${journalled()} slides finished before the kill`);
  const rerun = await tileInfer(args(out));
  t.equal(rerun.code, 3, rerun.stderr);
  t.match(rerun.stderr, /finished before/, 'the slides finished before the kill are skipped');
  const expected = outputs(reference);
  const got = outputs(out);
  t.same([...got.keys()].sort(), [...expected.keys()].sort());
  for (const [name, bytes] of expected) t.ok(bytes.equals(got.get(name)!), `${name} identical`);
  t.same(
    summaryRows(join(out, 'summary.csv')).map((r) => [r.slide, r.status, r.tiles]),
    summaryRows(join(reference, 'summary.csv')).map((r) => [r.slide, r.status, r.tiles]),
  );
});
