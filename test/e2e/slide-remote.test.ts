// Slides where they live: an OME-TIFF written by tifffile (python3-tifffile) from a synthetic
// TIFF's very JPEG tiles, the TIFF over HTTP from a real nginx (range requests), and both from a
// real S3-compatible server (s3rver, SigV4 checked) as s3:// URLs. Each gives the files the local
// TIFF gives, byte for byte; so do libvips' LZW (with a predictor) and deflate copies, read
// remotely by geotiff.js' decoders, against the same files read here by libvips; Aperio SVS with
// JPEG 2000 tiles (OpenJPEG's codestreams) remotely, against OpenSlide here; a remote slide resumes after kill -9; a missing key, refused
// credentials and a server without ranges are each a TILE_ERR_* row while the other slides finish.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import t, { type Test } from 'tap';
import { decodeFrames } from '../../src/client/slide/frames.js';
import { openSlide } from '../../src/client/slide/open.js';
import type { BandJob } from '../../src/client/slide/slide.js';
import { startNginx, startS3rver } from '../../tools/remote-servers.js';
import { writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { ROOT, startServer, waitFor, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, summaryRows, tileInfer } from '../helpers/tile-infer.js';

const dir = mkdtempSync(join(tmpdir(), 'slide-remote-'));
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

t.test(
  "remote Aperio SVS with JPEG 2000 tiles (OpenJPEG's codestreams): the pixels OpenSlide reads here",
  async (t) => {
    // 33005 (R, G, B) and 33003 (Y, Cb, Cr with the chroma at half width, as Aperio writes it, and
    // at full width), lossless, from the TIFF's own pixels; OpenSlide (libopenjp2) reads the local
    // copies, this reader the ones nginx serves.
    const copies = join(dir, 'j2k');
    mkdirSync(copies, { recursive: true });
    const flat = join(copies, 'flat.tif');
    execFileSync('vips', ['tiffsave', tiffPath, flat, '--compression', 'none', '--tile', '--pyramid']);
    for (const mode of ['rgb', 'ycbcr', 'ycbcr444'])
      execFileSync(
        '/usr/bin/python3',
        [join(ROOT, 'tools/synthetic/aperio-j2k.py'), flat, join(copies, `${mode}.svs`), mode, '0.5'],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
    // OpenJPEG turns half-width chroma to RGB itself, rounding a level apart from OpenSlide's tables.
    for (const [mode, tolerance] of [
      ['rgb', 0],
      ['ycbcr444', 0],
      ['ycbcr', 1],
    ] as const) {
      const local = await openSlide(join(copies, `${mode}.svs`));
      const remote = await openSlide(`${nginx.url}/j2k/${mode}.svs`);
      t.equal(local.reader, 'openslide');
      t.equal(remote.reader, 'tiff');
      t.same(remote.levels, local.levels, `${mode}: the pyramid`);
      t.equal(remote.mpp, 0.5, `${mode}: the MPP from the ImageDescription`);
      for (const [level, { width, height }] of local.levels.entries()) {
        const [a, b] = await Promise.all([
          local.readRegion(level, 0, 0, width, height),
          remote.readRegion(level, 0, 0, width, height),
        ]);
        let most = 0;
        for (let i = 0; i < a.length; i++) most = Math.max(most, Math.abs(a[i] - b[i]));
        t.ok(most <= tolerance, `${mode} level ${level}: at most ${tolerance} apart (${most})`);
      }
      await Promise.all([local.close(), remote.close()]);
    }
    // A tile never written (TileByteCounts 0, as sparse SVS have) is background: no range request
    // of 0 bytes (which HTTP cannot say) goes out for it.
    const sparse = join(copies, 'sparse.svs');
    copyFileSync(join(copies, 'rgb.svs'), sparse);
    execFileSync('/usr/bin/python3', [
      '-c',
      'import sys, tifffile\nwith tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n tag = f.pages[0].tags["TileByteCounts"]\n counts = list(tag.value)\n counts[1] = 0\n tag.overwrite(counts)',
      sparse,
    ]);
    const [whole, holed] = [
      await openSlide(`${nginx.url}/j2k/rgb.svs`),
      await openSlide(`${nginx.url}/j2k/sparse.svs`),
    ];
    const tileSide = holed.bandSource!(0).tileWidth;
    const [a, b] = await Promise.all([
      whole.readRegion(0, 0, 0, 3 * tileSide, tileSide),
      holed.readRegion(0, 0, 0, 3 * tileSide, tileSide),
    ]);
    const row = 3 * tileSide * 3;
    let white = true;
    let same = true;
    for (let y = 0; y < tileSide; y++)
      for (let x = 0; x < 3 * tileSide * 3; x++) {
        const i = y * row + x;
        if (x >= tileSide * 3 && x < 2 * tileSide * 3) white &&= b[i] === 255;
        else same &&= a[i] === b[i];
      }
    t.ok(white, 'the unwritten tile is white');
    t.ok(same, 'its neighbours are as in the whole file');
    await Promise.all([whole.close(), holed.close()]);
    // The whole pipeline, on the reader pool's threads: the RGB copy's files, here and there, are one.
    const [here, there] = [join(dir, 'j2k-local'), join(dir, 'j2k-remote')];
    const local = await tileInfer(args([join(copies, 'rgb.svs')], here));
    t.equal(local.code, 0, local.stderr);
    const remote = await tileInfer(args([`${nginx.url}/j2k/rgb.svs`], there));
    t.equal(remote.code, 0, remote.stderr);
    const expected = outputs(here);
    const got = outputs(there);
    t.ok(expected.size >= 6, `${expected.size} files`);
    for (const [name, bytes] of expected) t.ok(got.get(name)?.equals(bytes), `${name} identical`);
  },
);

t.test("JPEG 2000 tiles OpenJPEG cannot decode or would misread: an error, never another tile's pixels", async (t) => {
  const work = join(dir, 'j2k-tiles');
  mkdirSync(work, { recursive: true });
  /** A 64x64 codestream by opj_compress from raw planes (subsampling as its -F flag writes it). */
  const encode = (name: string, planes: Buffer, format: string) => {
    writeFileSync(join(work, `${name}.raw`), planes);
    execFileSync(
      'opj_compress',
      ['-i', join(work, `${name}.raw`), '-o', join(work, `${name}.j2k`), '-F', format, '-mct', '0'],
      {
        stdio: 'ignore',
      },
    );
    return readFileSync(join(work, `${name}.j2k`));
  };
  const plane = (value: number, w = 64, h = 64) => Buffer.alloc(w * h, value);
  const red = encode('red', Buffer.concat([plane(200), plane(30), plane(40)]), '64,64,3,8,u');
  const halfHeight = encode(
    'y440',
    Buffer.concat([plane(90), plane(100, 64, 32), plane(200, 64, 32)]),
    '64,64,3,8,u@1x1:1x2:1x2',
  );
  const job = (coding: 'j2k' | 'j2k-ycbcr', tiles: Uint8Array[]): BandJob => ({
    path: 'test',
    page: 0,
    subifd: -1,
    tileWidth: 64,
    tileHeight: 64,
    tiles: tiles.length,
    left: 0,
    top: 0,
    width: 64 * tiles.length,
    height: 64,
    frames: { coding, tiles: tiles.map((bytes) => ({ bytes })) },
  });
  const into = () => new Uint8Array(64 * 64 * 3 * 2);
  await t.rejects(decodeFrames(job('j2k', [red, new Uint8Array(0)]), into()), {
    message: /frame 2 of the band at 0,0 is empty \(0 bytes\)/,
  });
  await t.rejects(decodeFrames(job('j2k', [red, red.subarray(0, 60)]), into()), {
    message: /a JPEG 2000 frame OpenJPEG cannot decode: Stream too short/,
  });
  await t.rejects(decodeFrames(job('j2k', [red, Buffer.from('not a codestream at all')]), into()), {
    message: /a JPEG 2000 frame OpenJPEG cannot decode/,
  });
  await t.rejects(decodeFrames(job('j2k-ycbcr', [halfHeight]), into()), {
    message: /subsampled 1x1, 1x2, 1x2, which OpenJPEG does not turn to RGB: not read/,
  });
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
