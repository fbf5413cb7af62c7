// Slides where they live: an OME-TIFF written by tifffile (python3-tifffile) from a synthetic
// TIFF's very JPEG tiles, the TIFF over HTTP from a real nginx (range requests), and both from a
// real S3-compatible server (s3rver, SigV4 checked) as s3:// URLs. Each gives the files the local
// TIFF gives, byte for byte; so do libvips' LZW (with a predictor) and deflate copies, read
// remotely by geotiff.js' decoders, against the same files read here by libvips (JPEG 2000 SVS:
// slide-j2k.test.ts); a remote slide resumes after kill -9; a missing key, refused
// credentials and a server without ranges are each a TILE_ERR_* row while the other slides finish.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import t, { type Test } from 'tap';
import { openSlide } from '../../src/client/slide/open.js';
import { startNginx, startS3rver } from '../../tools/remote-servers.js';
import { writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { ROOT, startServer, waitFor, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, summaryRows, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('slide-remote');
// Small (about 30 tiles): five runs of it fit the file's time on a shared machine.
const TIFF: SlideSpec = {
  widthUm: 1200,
  heightUm: 900,
  mpp: 0.5,
  seed: 21,
  format: 'tiff',
  islands: [
    { cx: 380, cy: 420, rx: 260, ry: 200 },
    { cx: 860, cy: 480, rx: 200, ry: 250 },
  ],
};
// Every copy is named tiff-slide.tif, so that its outputs have the reference's names.
const tiffPath = join(dir, 'tiff-slide.tif');
const omePath = join(dir, 'ome', 'tiff-slide.tif');
const okPath = join(dir, 'ok-slide.tif');

const python = (...args: string[]) =>
  execFileSync('/usr/bin/python3', [join(ROOT, 'tools/synthetic/ome-tiff.py'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });

let server: TestServer;
let nginx: Awaited<ReturnType<typeof startNginx>>;
let s3: Awaited<ReturnType<typeof startS3rver>>;
const reference = join(dir, 'reference');

const args = (slides: string[], out: string, extra: string[] = []) =>
  slideCommand(slides, { model: 'gene-expr', out, server: server.url }, extra);

/** The files of `out` are the reference's, byte for byte. */
function sameOutputs(t: Test, out: string) {
  const expected = outputs(reference);
  const got = outputs(out);
  t.same([...got.keys()].sort(), [...expected.keys()].sort(), 'the same files');
  for (const [name, bytes] of expected) t.ok(bytes.equals(got.get(name)!), `${name} identical`);
}

t.before(async () => {
  await writeSlide(tiffPath, TIFF);
  mkdirSync(join(dir, 'ome'));
  python(tiffPath, omePath, '0.5');
  python(tiffPath, join(dir, 'ome', 'nm.ome.tif'), '0.5', 'nm');
  copyFileSync(tiffPath, okPath);
  nginx = await startNginx(dir);
  s3 = await startS3rver('slides');
  const client = new S3Client({
    endpoint: s3.url,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: s3.env.AWS_ACCESS_KEY_ID!, secretAccessKey: s3.env.AWS_SECRET_ACCESS_KEY! },
  });
  for (const [key, path] of [
    ['tiff/tiff-slide.tif', tiffPath],
    ['ome/tiff-slide.tif', omePath],
  ])
    await client.send(new PutObjectCommand({ Bucket: 'slides', Key: key, Body: readFileSync(path) }));
  client.destroy();
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'gene-expr', max_batch: 1 },
    ],
  });
  const run = await tileInfer(args([tiffPath], reference));
  if (run.code !== 0) throw new Error(run.stderr);
});
t.teardown(async () => {
  await server?.stop();
  await nginx?.stop();
  await s3?.stop();
});

t.test('OME-TIFF from tifffile: SubIFD levels and the OME-XML MPP, the same files as the TIFF', async (t) => {
  const info = execFileSync(
    '/usr/bin/python3',
    [
      '-c',
      'import sys, tifffile; p = tifffile.TiffFile(sys.argv[1]).pages[0]; print(len(p.subifds or ()), "OME" in p.description)',
      omePath,
    ],
    { encoding: 'utf8' },
  );
  t.equal(info.trim(), '2 True', 'two reduced levels in SubIFDs, OME-XML in the description');
  for (const path of [omePath, join(dir, 'ome', 'nm.ome.tif')]) {
    const [ome, tiff] = [await openSlide(path), await openSlide(tiffPath)];
    t.same(ome.levels, tiff.levels, `${path}: the TIFF's pyramid`);
    t.equal(ome.mpp, 0.5, `${path}: MPP from PhysicalSizeX/Y`);
    await Promise.all([ome.close(), tiff.close()]);
  }
  const out = join(dir, 'ome-out');
  const run = await tileInfer(args([omePath], out));
  t.equal(run.code, 0, run.stderr);
  sameOutputs(t, out);
});

t.test('over HTTP from nginx: range requests, the same files, never the whole file', async (t) => {
  const out = join(dir, 'http-out');
  const before = nginx.log().length;
  const run = await tileInfer(args([`${nginx.url}/tiff-slide.tif`], out));
  t.equal(run.code, 0, run.stderr);
  sameOutputs(t, out);
  const requests = nginx
    .log()
    .slice(before)
    .map((line) => line.split(' '));
  t.ok(requests.length > 2, `${requests.length} requests`);
  t.ok(
    requests.every(([status]) => status === '206'),
    'every answer a 206 Partial Content',
  );
  const sent = requests.reduce((n, [, bytes]) => n + Number(bytes), 0);
  const size = statSync(tiffPath).size;
  // The tissue covers most of this small slide; the bench measures the bytes against the tiles'.
  t.ok(sent < size, `${sent} bytes fetched of the ${size}-byte file: not the whole file`);
});

t.test(
  's3:// from an S3-compatible server (AWS_ENDPOINT_URL): an OME-TIFF killed mid-slide, rerun, run again',
  async (t) => {
    const env = s3.env;
    const slide = 's3://slides/ome/tiff-slide.tif';
    const out = join(dir, 's3-killed');
    const journal = join(out, '.journal', 'tiff-slide.gene-expr.jsonl');
    const lines = () => (existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').length - 2 : 0);
    const first = await tileInfer(args([slide], out), {
      env,
      onStart: (proc) => void waitFor(() => lines() >= 8, 120000).then(() => proc.kill('SIGKILL')),
    });
    t.equal(first.code, null, 'killed');
    t.notOk(existsSync(join(out, 'features_gene-expr/tiff-slide.h5')), 'killed before the end');
    const done = lines();
    const rerun = await tileInfer(args([slide], out), { env });
    t.equal(rerun.code, 0, rerun.stderr);
    t.ok(done >= 8, `${done} tiles kept from the killed run`);
    sameOutputs(t, out);
    // Known by its URL, ETag and size: finished, so skipped.
    const again = await tileInfer(args([slide], out), { env });
    t.equal(again.code, 0, again.stderr);
    t.match(again.stderr, /finished before \(\d+ tiles\); skipped/);
  },
);

t.test('remote TIFFs with LZW and deflate tiles (libvips): the files their local copies give', async (t) => {
  const copies = join(dir, 'vips');
  mkdirSync(copies, { recursive: true });
  // libvips writes LZW with the horizontal predictor by default; deflate here without one.
  execFileSync('vips', ['tiffsave', tiffPath, join(copies, 'lzw.tif'), '--compression', 'lzw', '--tile', '--pyramid']);
  execFileSync('vips', [
    'tiffsave',
    tiffPath,
    join(copies, 'deflate.tif'),
    '--compression',
    'deflate',
    '--predictor',
    'none',
    '--tile',
    '--tile-width',
    '240',
    '--tile-height',
    '240',
    '--pyramid',
  ]);
  execFileSync('vips', [
    'tiffsave',
    tiffPath,
    join(copies, 'webp.tif'),
    '--compression',
    'webp',
    '--tile',
    '--pyramid',
  ]);
  const client = new S3Client({
    endpoint: s3.url,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: s3.env.AWS_ACCESS_KEY_ID!, secretAccessKey: s3.env.AWS_SECRET_ACCESS_KEY! },
  });
  await client.send(
    new PutObjectCommand({
      Bucket: 'slides',
      Key: 'vips/deflate.tif',
      Body: readFileSync(join(copies, 'deflate.tif')),
    }),
  );
  client.destroy();
  const [local, remote] = [join(dir, 'vips-local'), join(dir, 'vips-remote')];
  const here = await tileInfer(args([join(copies, 'lzw.tif'), join(copies, 'deflate.tif')], local));
  t.equal(here.code, 0, here.stderr);
  const there = await tileInfer(
    args([`${nginx.url}/vips/lzw.tif`, 's3://slides/vips/deflate.tif', `${nginx.url}/vips/webp.tif`], remote),
    { env: s3.env },
  );
  t.equal(there.code, 3, `the WebP copy fails: ${there.stderr}`);
  const expected = outputs(local);
  const got = outputs(remote);
  t.ok(expected.size >= 12, `${expected.size} files`);
  for (const [name, bytes] of expected) t.ok(got.get(name)?.equals(bytes), `${name} identical`);
  t.match(summaryRows(join(remote, 'summary.csv')), [
    { status: 'done' },
    { status: 'done' },
    {
      slide: `${nginx.url}/vips/webp.tif`,
      status: 'failed',
      reason: /TILE_ERR_SLIDE_FORMAT.*TIFF compression 50001.*copy this one here/,
    },
  ]);
});

t.test('bad remote slides: each a TILE_ERR_* row, the other slides done', async (t) => {
  const out = join(dir, 'bad');
  const manifest = join(dir, 'bad.csv');
  writeFileSync(
    manifest,
    [
      'wsi',
      'ok-slide.tif',
      's3://slides/missing/gone.tif',
      `${nginx.url}/no-ranges/no-ranges.tif`,
      `${nginx.url}/absent.tif`,
    ].join('\n') + '\n',
  );
  copyFileSync(tiffPath, join(dir, 'no-ranges.tif'));
  const before = nginx.log().length;
  const run = await tileInfer(args([manifest], out), { env: s3.env });
  t.equal(run.code, 3, `failed slides: exit 3 ${run.stderr}`);
  const rows = summaryRows(join(out, 'summary.csv'));
  t.match(rows, [
    { slide: 'ok-slide.tif', status: 'done' },
    { slide: 's3://slides/missing/gone.tif', status: 'failed', reason: /TILE_ERR_SLIDE_MISSING.*NoSuchKey/ },
    {
      slide: `${nginx.url}/no-ranges/no-ranges.tif`,
      status: 'failed',
      reason: /TILE_ERR_SLIDE_NO_RANGES.*does not serve byte ranges/,
    },
    { slide: `${nginx.url}/absent.tif`, status: 'failed', reason: /TILE_ERR_SLIDE_MISSING.*404/ },
  ]);
  const noRanges = nginx
    .log()
    .slice(before)
    .filter((line) => line.includes('/no-ranges/'));
  t.equal(noRanges.length, 1, 'one request to the server without ranges, then none');

  // Credentials the server refuses (an access key it does not know: InvalidAccessKeyId, 403).
  // The local slide finished above: skipped here, done.
  const denied = await tileInfer(args(['s3://slides/tiff/tiff-slide.tif', manifest], out), {
    env: { ...s3.env, AWS_ACCESS_KEY_ID: 'NOT-A-KEY' },
  });
  t.equal(denied.code, 3, denied.stderr);
  t.match(summaryRows(join(out, 'summary.csv')).slice(0, 2), [
    {
      slide: 's3://slides/tiff/tiff-slide.tif',
      status: 'failed',
      reason: /TILE_ERR_SLIDE_DENIED.*InvalidAccessKeyId.*403/,
    },
    { slide: 'ok-slide.tif', status: 'done' },
  ]);
});
