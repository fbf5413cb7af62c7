// tile-infer on DICOM WSI made from a synthetic TIFF by OrthancWSIDicomizer (Debian's orthanc-wsi),
// as folders of files, served by a real Orthanc with its DICOMweb plugin, and as files in object
// storage (s3rver) and over HTTP (nginx, range requests): the features,
// coordinates and tissue masks equal the TIFF's bit for bit (the converter keeps the TIFF's JPEG
// tiles as they are), a finished series is skipped on a rerun, kill -9 then rerun resumes, and
// each damaged or unreachable slide fails with its code while the others are done.
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { basename, join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { parse } from 'csv-parse/sync';
import dicomParser from 'dicom-parser';
import h5wasm from 'h5wasm/node';
import t from 'tap';
import { writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { dicomize, startOrthanc, uidsOf, type Orthanc } from '../../tools/orthanc.js';
import { startNginx, startS3rver } from '../../tools/remote-servers.js';
import { openSlide } from '../../src/client/slide/open.js';
import { ROOT, startServer, waitFor, type TestServer } from '../helpers/server.js';
import { freePort, outputs, slideCommand, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const MODELS = [
  { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
  { name: 'gene-expr', max_batch: 1 },
];
const dir = tempDir('tile-infer-dicom');
// Not square, so that the converter's width/height swap shows (1.6 x 1.2 mm at 0.5 MPP).
const SPEC: SlideSpec = {
  widthUm: 1600,
  heightUm: 1200,
  mpp: 0.5,
  seed: 21,
  format: 'tiff',
  islands: [
    { cx: 560, cy: 600, rx: 380, ry: 300 },
    { cx: 1200, cy: 560, rx: 250, ry: 320 },
  ],
};
const tiff = join(dir, 'tiff.tif');
/** OrthancWSIDicomizer 1.1 computes PixelSpacing from --imaged-width over the rows and
 *  --imaged-height over the columns: given swapped, the spacing is right. */
const SWAPPED: [number, number] = [SPEC.heightUm / 1000, SPEC.widthUm / 1000];

let server: TestServer;
let orthanc: Orthanc;
let locked: Orthanc;
let port = 0;
let s3: Awaited<ReturnType<typeof startS3rver>>;
let nginx: Awaited<ReturnType<typeof startNginx>>;
const folders: Record<string, string> = {};
const urls: Record<string, string> = {};

const copyFolder = (from: string, name: string) => {
  const to = join(dir, name);
  mkdirSync(to);
  for (const f of readdirSync(from)) copyFileSync(join(from, f), join(to, f));
  return to;
};
const levelZero = (folder: string) => join(folder, readdirSync(folder).sort()[0]);

t.before(async () => {
  port = await freePort();
  await writeSlide(tiff, SPEC);
  // Whole levels in one instance each, and (the converter's default 10 MB cut scaled to this
  // slide, a tenth of a scan) level 0 split across instances.
  folders.full = join(dir, 'full');
  await dicomize(tiff, folders.full, SWAPPED, ['--max-size', '0']);
  folders.split = join(dir, 'split');
  await dicomize(tiff, folders.split, SWAPPED, ['--max-size', '1']);
  // Made the way the converter's options read (width, height): its PixelSpacing is not square.
  folders.wrong = join(dir, 'wrong');
  await dicomize(tiff, folders.wrong, [SPEC.widthUm / 1000, SPEC.heightUm / 1000]);
  // JPEG 2000 (lossless), re-encoded by the converter: its own pyramid below level 0.
  folders.j2k = join(dir, 'j2k');
  await dicomize(tiff, folders.j2k, SWAPPED, ['--compression', 'jpeg2000', '--reencode', '1', '--max-size', '0']);
  const locked_ = join(dir, 'locked-source');
  await dicomize(tiff, locked_, SWAPPED);
  // Damaged copies: a second series beside the first; another SOP class; NumberOfFrames one
  // more than the frames held; level 0 cut in the middle of its frames.
  folders['two-series'] = copyFolder(folders.full, 'two-series');
  copyFileSync(levelZero(folders.split), join(folders['two-series'], 'other-series.dcm'));
  folders['not-wsi'] = copyFolder(folders.full, 'not-wsi');
  for (const f of readdirSync(folders['not-wsi']))
    execFileSync('dcmodify', ['-nb', '-m', '(0008,0016)=1.2.840.10008.5.1.4.1.1.7', join(folders['not-wsi'], f)]);
  folders['missing-frame'] = copyFolder(folders.full, 'missing-frame');
  execFileSync('dcmodify', [
    '-nb',
    '-m',
    '(0028,0008)=' +
      (Number(/\[(\d+)\]/.exec(execFileSync('dcmdump', ['+P', '0028,0008', levelZero(folders.full)]).toString())![1]) +
        1),
    levelZero(folders['missing-frame']),
  ]);
  // Level 0's instance gone: read from the next level, 4x coarser than the model, and said.
  folders['no-level0'] = copyFolder(folders.full, 'no-level0');
  rmSync(levelZero(folders['no-level0']));
  folders.truncated = copyFolder(folders.full, 'truncated');
  const cut = levelZero(folders.truncated);
  truncateSync(cut, Math.floor(readFileSync(cut).length * 0.6));
  // Level 0 alone, the series a single instance over HTTP is; and level 0 with its Basic Offset
  // Table emptied (allowed by the standard), which a remote reader cannot place frames without.
  folders.level0 = join(dir, 'level0-local');
  mkdirSync(folders.level0);
  copyFileSync(levelZero(folders.full), join(folders.level0, 'level0.dcm'));
  // Level 0 rewritten by pydicom with an Extended Offset Table (and an empty Basic one).
  folders.eot = join(dir, 'eot-local');
  mkdirSync(folders.eot);
  execFileSync('/usr/bin/python3', [
    join(ROOT, 'tools/synthetic/dicom-eot.py'),
    levelZero(folders.full),
    join(folders.eot, 'level0.dcm'),
  ]);
  const served = join(dir, 'served');
  mkdirSync(served);
  copyFileSync(levelZero(folders.full), join(served, 'level0.dcm'));
  const whole = readFileSync(levelZero(folders.full));
  const pixels = dicomParser.parseDicom(whole, { untilTag: 'x7fe00010' }).elements.x7fe00010.dataOffset;
  const tableEnd = pixels + 8 + whole.readUInt32LE(pixels + 4);
  const emptied = Buffer.concat([whole.subarray(0, pixels + 4), Buffer.alloc(4), whole.subarray(tableEnd)]);

  [server, orthanc, locked, s3, nginx] = await Promise.all([
    startServer({ models: MODELS, config: { port } }),
    startOrthanc(),
    startOrthanc({ reader: 'secret' }),
    startS3rver('wsi'),
    startNginx(served),
  ]);
  // The Imaging Data Commons' layout: a folder of instances per series.
  const bucket = new S3Client({
    forcePathStyle: true,
    endpoint: s3.url,
    region: 'us-east-1',
    credentials: {
      accessKeyId: s3.env.AWS_ACCESS_KEY_ID!,
      secretAccessKey: s3.env.AWS_SECRET_ACCESS_KEY!,
    },
  });
  const put = (key: string, body: Buffer) => bucket.send(new PutObjectCommand({ Bucket: 'wsi', Key: key, Body: body }));
  for (const k of ['full', 'split', 'truncated'])
    for (const f of readdirSync(folders[k])) await put(`s3-${k}/${f}`, readFileSync(join(folders[k], f)));
  // The split series beside an instance of another series, which its folder's listing finds too.
  await put('s3-split/zz-other-series.dcm', readFileSync(levelZero(folders.wrong)));
  await put('no-table/no-table.dcm', emptied);
  // The same, beside a folder marker and a subfolder holding another series (not part of it).
  await put('eot/level0.dcm', readFileSync(join(folders.eot, 'level0.dcm')));
  await put('eot/.keep', Buffer.alloc(0));
  await put('eot/sub/other-series.dcm', readFileSync(levelZero(folders.wrong)));
  await put('not-dicom/readme.txt', Buffer.from('no slide here'));
  bucket.destroy();
  urls.s3Full = 's3://wsi/s3-full/';
  urls.s3SplitInstance = `s3://wsi/s3-split/${basename(levelZero(folders.split))}`;
  urls.s3Truncated = 's3://wsi/s3-truncated/';
  urls.s3NoTable = 's3://wsi/no-table/no-table.dcm';
  urls.s3NotDicom = 's3://wsi/not-dicom/';
  urls.s3Missing = 's3://wsi/s3-full/no-such-instance.dcm';
  urls.https = `${nginx.url}/level0.dcm`;
  urls.s3Eot = 's3://wsi/eot/';
  const files = (folder: string) => readdirSync(folder).map((f) => join(folder, f));
  await orthanc.upload([...files(folders.full), ...files(folders.split)]);
  await locked.upload(files(locked_));
  const full = await uidsOf(levelZero(folders.full));
  const split = await uidsOf(levelZero(folders.split));
  const lockedIds = await uidsOf(levelZero(locked_));
  urls.series = `${orthanc.dicomWeb}/studies/${full.study}/series/${full.series}`;
  urls.study = `${orthanc.dicomWeb}/studies/${split.study}`;
  urls.splitSeries = `${orthanc.dicomWeb}/studies/${split.study}/series/${split.series}`;
  urls.missing = `${orthanc.dicomWeb}/studies/${full.study}/series/1.2.3.4.5`;
  urls.down = `http://127.0.0.1:${await freePort()}/dicom-web/studies/1.2.3/series/1.2.3.6.7`;
  urls.locked = `${locked.dicomWeb}/studies/${lockedIds.study}/series/${lockedIds.series}`;
});
t.teardown(() => Promise.all([server?.stop(), orthanc?.stop(), locked?.stop(), s3?.stop(), nginx?.stop()]));

const args = (inputs: string[], out: string) =>
  slideCommand(inputs, { model: 'gene-expr', out, server: `http://127.0.0.1:${port}` });

async function h5(path: string): Promise<{ features: Float32Array; coords: Int32Array; mpp: number }> {
  await h5wasm.ready;
  const file = new h5wasm.File(path, 'r');
  try {
    const coords = file.get('coords') as InstanceType<typeof h5wasm.Dataset>;
    return {
      features: (file.get('features') as InstanceType<typeof h5wasm.Dataset>).value as Float32Array,
      coords: coords.value as Int32Array,
      mpp: coords.attrs.level0_mpp.value as number,
    };
  } finally {
    file.close();
  }
}

const out = join(dir, 'cohort');

/** summary.csv's rows by slide. */
const summaryOf = (folder: string) =>
  new Map(
    (parse(readFileSync(join(folder, 'summary.csv')), { columns: true }) as Record<string, string>[]).map((r) => [
      r.slide,
      r,
    ]),
  );

t.test('a cohort of the TIFF, its DICOM copies and DICOMweb series, and bad DICOM: each as it should be', async (t) => {
  const manifest = join(dir, 'cohort.csv');
  const wrongWithMpp = copyFolder(folders.wrong, 'wrong-given-mpp');
  const rows = [
    [tiff, ''],
    ...['full', 'split', 'j2k', 'wrong', 'two-series', 'not-wsi', 'missing-frame', 'truncated', 'no-level0'].map(
      (k) => [folders[k], ''],
    ),
    [wrongWithMpp, '0.5'],
    [urls.series, ''],
    [urls.study, ''],
    [urls.missing, ''],
    [urls.down, ''],
    [urls.locked, ''],
    ...['s3Full', 's3SplitInstance', 's3Truncated', 's3NoTable', 's3NotDicom', 's3Missing', 'https', 's3Eot'].map(
      (k) => [urls[k], ''],
    ),
    [folders.level0, ''],
    [folders.eot, ''],
  ];
  writeFileSync(manifest, `wsi,mpp\n${rows.map((r) => r.join(',')).join('\n')}\n`);
  const logged = nginx.log().length;
  const run = await tileInfer(args([manifest], out), { timeoutMs: 600_000, env: s3.env });
  t.equal(run.code, 3, `some slides failed: ${run.stderr}`);
  const summary = summaryOf(out);
  const reason = (slide: string) => summary.get(slide)?.reason ?? `no row: ${[...summary.keys()].join(' ')}`;
  // The copies of the TIFF's pixels, which the features below compare with the TIFF's.
  const copies = [
    folders.full,
    folders.split,
    wrongWithMpp,
    urls.series,
    urls.splitSeries,
    urls.s3Full,
    urls.s3SplitInstance,
  ];
  for (const slide of [tiff, ...copies, urls.https, folders.level0, folders.eot, urls.s3Eot])
    t.equal(summary.get(slide)?.status, 'done', `${slide}: ${reason(slide)}`);
  // The instance its identity opened (for its series UID) is the one its reader reads.
  const firstBlocks = nginx
    .log()
    .slice(logged)
    .map((line) => line.split(' '))
    .filter(([, , uri, range]) => uri === '/level0.dcm' && range.startsWith('bytes=0-'));
  t.equal(firstBlocks.length, 1, "the HTTP instance's first block fetched once");
  t.match(
    reason(urls.s3Truncated),
    /^\[TILE_ERR_SLIDE_UNREADABLE\] .*: truncated: frame \d+ of \d+ lies past the file's end/,
  );
  t.match(reason(urls.s3NoTable), /^\[TILE_ERR_SLIDE_FORMAT\] .*no offset table.*would read the whole file/);
  t.match(reason(urls.s3NotDicom), /^\[TILE_ERR_SLIDE_MISSING\] .*no DICOM file in this folder/);
  t.match(reason(urls.s3Missing), /^\[TILE_ERR_SLIDE_MISSING\] .*not found/);

  t.match(
    reason(folders.wrong),
    /^\[TILE_ERR_SLIDE_MPP_CONFLICT\] .*PixelSpacing 0\.000\d+\\0\.000\d+ mm .*not square.*--mpp/,
  );
  const [a, b] = [uidsOf(levelZero(folders.full)), uidsOf(levelZero(folders.split))];
  const [seriesA, seriesB] = [(await a).series, (await b).series];
  t.match(reason(folders['two-series']), /^\[TILE_ERR_SLIDE_SERIES\] /);
  t.ok(
    reason(folders['two-series']).includes(seriesA) && reason(folders['two-series']).includes(seriesB),
    'names both series UIDs',
  );
  t.match(
    reason(folders['not-wsi']),
    /^\[TILE_ERR_SLIDE_FORMAT\] .*SOP class 1\.2\.840\.10008\.5\.1\.4\.1\.1\.7 \(Secondary Capture Image\)/,
  );
  t.match(reason(folders['missing-frame']), /^\[TILE_ERR_SLIDE_UNREADABLE\] .*frame \d+ is missing/);
  t.match(reason(folders.truncated), /^\[TILE_ERR_SLIDE_UNREADABLE\] .*: truncated: /);
  t.equal(summary.get(folders['no-level0'])?.status, 'done', reason(folders['no-level0']));
  t.match(
    reason(folders['no-level0']),
    /^warning: the slide's finest level is 2 µm\/px, coarser than the model's 0\.5 µm\/px: its tiles were upsampled 4x from it/,
  );
  t.match(reason(urls.missing), /^\[TILE_ERR_SLIDE_DICOMWEB_NOT_FOUND\] /);
  t.ok(reason(urls.missing).includes(urls.missing), 'names the URL');
  t.match(reason(urls.down), /^\[TILE_ERR_SLIDE_DICOMWEB_DOWN\] .*ECONNREFUSED/);
  t.match(reason(urls.locked), /^\[TILE_ERR_SLIDE_DICOMWEB_AUTH\] .*401.*TILE_INFER_DICOMWEB_AUTHORIZATION/);
  t.ok(reason(urls.locked).includes(urls.locked), 'names the URL');

  // The same tiles, features, coordinates and tissue as the TIFF, bit for bit.
  const stemOf = (slide: string) =>
    /^https?:/.test(slide) ? slide.slice(slide.lastIndexOf('/') + 1) : basename(slide).replace(/\.(tif|dcm)$/, '');
  const expected = await h5(join(out, 'features_gene-expr/tiff.h5'));
  const mask = readFileSync(join(out, 'tissue/tiff.png'));
  t.ok(expected.coords.length / 2 > 20, `${expected.coords.length / 2} tiles`);
  for (const slide of copies) {
    const got = await h5(join(out, `features_gene-expr/${stemOf(slide)}.h5`));
    t.equal(got.mpp, 0.5, `${stemOf(slide)}: MPP`);
    t.same(Array.from(got.coords), Array.from(expected.coords), `${stemOf(slide)}: coordinates`);
    t.ok(
      Buffer.from(got.features.buffer).equals(Buffer.from(expected.features.buffer)),
      `${stemOf(slide)}: features bit for bit`,
    );
    t.ok(readFileSync(join(out, `tissue/${stemOf(slide)}.png`)).equals(mask), `${stemOf(slide)}: tissue mask`);
  }

  // One instance over HTTP is its level alone, and so is its Extended Offset Table copy (here and
  // in S3): the same files as that instance alone in a folder.
  const local = await h5(join(out, 'features_gene-expr/level0-local.h5'));
  t.ok(local.coords.length > 0, `level 0 alone: ${local.coords.length / 2} tiles`);
  for (const [label, stem] of [
    ['https instance', 'level0'],
    ['Extended Offset Table, here', 'eot-local'],
    ['Extended Offset Table, S3', 'eot'],
  ]) {
    const got = await h5(join(out, `features_gene-expr/${stem}.h5`));
    t.same(Array.from(got.coords), Array.from(local.coords), `${label}: coordinates`);
    t.ok(Buffer.from(got.features.buffer).equals(Buffer.from(local.features.buffer)), `${label}: features bit for bit`);
  }

  // JPEG 2000: level 0 holds the TIFF's pixels losslessly, so a tile in both grids has the same
  // features bit for bit; the grid itself may differ at the tissue's edge, the overview being
  // made from the converter's own lower levels.
  t.equal(summary.get(folders.j2k)?.status, 'done', reason(folders.j2k));
  const j2k = await h5(join(out, 'features_gene-expr/j2k.h5'));
  const dim = expected.features.length / (expected.coords.length / 2);
  const rowOf = new Map(
    Array.from({ length: expected.coords.length / 2 }, (_, k) => [
      `${expected.coords[k * 2]},${expected.coords[k * 2 + 1]}`,
      k,
    ]),
  );
  let common = 0;
  let same = 0;
  for (let k = 0; k < j2k.coords.length / 2; k++) {
    const row = rowOf.get(`${j2k.coords[k * 2]},${j2k.coords[k * 2 + 1]}`);
    if (row === undefined) continue;
    common++;
    if (
      Buffer.from(j2k.features.buffer, k * dim * 4, dim * 4).equals(
        Buffer.from(expected.features.buffer, row * dim * 4, dim * 4),
      )
    )
      same++;
  }
  t.ok(
    common / (rowOf.size + j2k.coords.length / 2 - common) >= 0.9,
    `JPEG 2000: ${common} tiles in both grids of ${rowOf.size} and ${j2k.coords.length / 2}`,
  );
  t.equal(same, common, 'JPEG 2000: the common tiles have the same features');

  // S3 down: the finished series fails this run (its identity cannot be read) and keeps its files.
  const down = await tileInfer(args([urls.s3Full], out), {
    env: { ...s3.env, AWS_ENDPOINT_URL: `http://127.0.0.1:${await freePort()}` },
  });
  t.equal(down.code, 3, down.stderr);
  t.match(
    summaryOf(out).get(urls.s3Full)?.reason,
    /^\[TILE_ERR_SLIDE_REMOTE\] s3:\/\/wsi\/s3-full\/: .*ECONNREFUSED/,
    'S3 down: a row naming the URL',
  );
  t.ok(existsSync(join(out, 'features_gene-expr/s3-full.h5')), 'S3 down: its finished files kept');

  // A rerun skips the finished series, and a token opens the locked server.
  const rerun = await tileInfer(args([folders.full, urls.series, urls.locked, urls.s3Full], out), {
    env: { ...s3.env, TILE_INFER_DICOMWEB_AUTHORIZATION: `Basic ${Buffer.from('reader:secret').toString('base64')}` },
  });
  t.equal(rerun.code, 0, rerun.stderr);
  t.match(rerun.stderr, new RegExp(`${folders.full}: finished before`));
  t.match(rerun.stderr, /s3:\/\/wsi\/s3-full\/: finished before/, 'the S3 series, known by its UID');
  t.match(rerun.stderr, /\/series\/[0-9.]+: finished before/);
  const locked = await h5(join(out, `features_gene-expr/${stemOf(urls.locked)}.h5`));
  t.ok(
    Buffer.from(locked.features.buffer).equals(Buffer.from(expected.features.buffer)),
    'the locked series, with the token: features bit for bit',
  );
});

t.test(
  'a DICOM instance over HTTP: its head, offset table and the frames of a region, never the whole file',
  async (t) => {
    const before = nginx.log().length;
    const slide = await openSlide(urls.https);
    const region = await slide.readRegion(0, 448, 448, 224, 224);
    const local = await openSlide(folders.level0);
    t.ok(
      Buffer.from(region).equals(Buffer.from(await local.readRegion(0, 448, 448, 224, 224))),
      "the local copy's pixels",
    );
    await Promise.all([slide.close(), local.close()]);
    const requests = nginx
      .log()
      .slice(before)
      .map((line) => line.split(' '));
    t.ok(
      requests.every(([status]) => status === '206'),
      'every answer a 206 Partial Content',
    );
    const fetched = requests.reduce((n, [, bytes]) => n + Number(bytes), 0);
    const size = readFileSync(join(folders.level0, 'level0.dcm')).length;
    t.ok(fetched < size / 4, `${fetched} bytes fetched in ${requests.length} requests of the ${size}-byte file`);
  },
);

t.test('kill -9 mid-slide on a DICOMweb series, then rerun: the same files as an uninterrupted run', async (t) => {
  const killedOut = join(dir, 'killed');
  const stem = urls.series.slice(urls.series.lastIndexOf('/') + 1);
  const journal = join(killedOut, '.journal', `${stem}.gene-expr.jsonl`);
  const lines = () => (existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').length - 2 : 0);
  const killed = await tileInfer(args([urls.series], killedOut), {
    onStart: (proc) => void waitFor(() => lines() >= 8, 120_000).then(() => proc.kill('SIGKILL')),
  });
  t.equal(killed.code, null, 'killed');
  t.notOk(existsSync(join(killedOut, `features_gene-expr/${stem}.h5`)), 'killed before the end');
  const rerun = await tileInfer(args([urls.series], killedOut));
  t.equal(rerun.code, 0, rerun.stderr);
  const got = outputs(killedOut);
  const all = outputs(out);
  for (const [name, bytes] of got) t.ok(bytes.equals(all.get(name)!), `${name} identical`);
  t.equal(got.size, [...all.keys()].filter((k) => k.includes(stem)).length);
});
