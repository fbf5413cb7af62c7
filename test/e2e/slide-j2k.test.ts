// Aperio SVS with JPEG 2000 tiles: codestreams written by OpenJPEG's opj_compress (Debian:
// libopenjp2-tools) into SVS files by tifffile (tools/synthetic/aperio-j2k.py), from a synthetic
// TIFF's pixels; served by a real nginx (range requests) and read by this reader, against OpenSlide
// (libopenjp2) reading the same files here; and read here from a local file as on a host without
// libopenslide0. Also the decoder's refusals: a codestream OpenJPEG cannot decode, an empty frame,
// chroma it does not turn to RGB.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { decodeFrames } from '../../src/client/slide/frames.js';
import { openSlide } from '../../src/client/slide/open.js';
import type { BandJob } from '../../src/client/slide/slide.js';
import { startNginx } from '../../tools/remote-servers.js';
import { writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { describe, unwriteTiles } from '../../tools/synthetic/tiff-tags.js';
import { ROOT, startServer, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('slide-j2k');
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
const tiffPath = join(dir, 'tiff-slide.tif');

/** What the built-in reader makes of a local file on a host without libopenslide0
 *  (TILE_INFER_OPENSLIDE=0, read once a process): its reader, or its error's code. */
const withoutOpenSlide = (path: string) =>
  execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const { openSlide } = await import(${JSON.stringify(join(ROOT, 'dist/src/client/slide/open.js'))});
       console.log(await openSlide(process.argv[1]).then((s) => s.reader, (err) => err.code));`,
      path,
    ],
    { env: { ...process.env, NODE_OPTIONS: '', TILE_INFER_OPENSLIDE: '0' }, encoding: 'utf8' },
  ).trim();

let server: TestServer;
let nginx: Awaited<ReturnType<typeof startNginx>>;
const args = (slides: string[], out: string) => slideCommand(slides, { model: 'gene-expr', out, server: server.url });

t.before(async () => {
  await writeSlide(tiffPath, TIFF);
  nginx = await startNginx(dir);
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'gene-expr', max_batch: 1 },
    ],
  });
});
t.teardown(async () => {
  await server?.stop();
  await nginx?.stop();
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
    // 512 px tiles: one opj_compress a tile, a few dozen a file.
    execFileSync('vips', [
      'tiffsave',
      tiffPath,
      flat,
      '--compression',
      'none',
      '--tile',
      '--tile-width',
      '512',
      '--tile-height',
      '512',
      '--pyramid',
    ]);
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
    // A JPEG 2000 TIFF that OpenSlide does not take (its ImageDescription no longer Aperio's, as
    // de-identification may leave it) is read here even where OpenSlide is installed: the pixels
    // of the Aperio file. Before, it was refused, saying it needed libopenslide0.
    const plain = join(copies, 'plain.tif');
    copyFileSync(join(copies, 'rgb.svs'), plain);
    describe(plain, 'de-identified');
    const [aperio, renamed] = [await openSlide(join(copies, 'rgb.svs')), await openSlide(plain)];
    t.equal(renamed.reader, 'tiff', 'not Aperio: the built-in reader, OpenSlide installed');
    const { width: w0, height: h0 } = aperio.levels[0];
    t.ok(
      Buffer.from(await renamed.readRegion(0, 0, 0, w0, h0)).equals(
        Buffer.from(await aperio.readRegion(0, 0, 0, w0, h0)),
      ),
      "its pixels are OpenSlide's of the Aperio file",
    );
    await Promise.all([aperio.close(), renamed.close()]);
    // A tile never written (TileByteCounts 0, as sparse SVS have) is background: no range request
    // of 0 bytes (which HTTP cannot say) goes out for it.
    const sparse = join(copies, 'sparse.svs');
    copyFileSync(join(copies, 'rgb.svs'), sparse);
    unwriteTiles(sparse, [1]);
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
    // Without libopenslide0 (TILE_INFER_OPENSLIDE=0: as a host without it) the local copy is read
    // here as the remote one is, its tiles from the file: the same files again. Before, it was
    // refused ("needs libopenslide0").
    t.equal(withoutOpenSlide(join(copies, 'rgb.svs')), 'tiff', 'without OpenSlide: the built-in reader');
    // A copy cut short is said so (its code kept), not "other formats need libopenslide".
    const cut = join(copies, 'cut.svs');
    writeFileSync(cut, readFileSync(join(copies, 'rgb.svs')).subarray(0, 200_000));
    t.equal(withoutOpenSlide(cut), 'TILE_ERR_SLIDE_TRUNCATED', 'without OpenSlide: a copy cut short');
    const alone = join(dir, 'j2k-no-openslide');
    const builtIn = await tileInfer(args([join(copies, 'rgb.svs')], alone), { env: { TILE_INFER_OPENSLIDE: '0' } });
    t.equal(builtIn.code, 0, builtIn.stderr);
    const read = outputs(alone);
    t.equal(read.size, expected.size, 'as many files');
    for (const [name, bytes] of expected) t.ok(read.get(name)?.equals(bytes), `without OpenSlide: ${name} identical`);
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
