// Sparse slides: tiles a TIFF directory says were never written (TileByteCounts 0), made by
// tifffile from libvips-written files. OpenSlide draws such a tile of an SVS transparent (over
// white: background); this reader, here (with libturbojpeg and without) and over HTTP (a real
// nginx), must read the same pixels, and tile-infer must run over the slide, where before the band
// holding the tile failed ("a JPEG stream of 0 bytes") and libvips refuses any region that
// touches it. The same for a local LZW TIFF (OpenSlide refuses a generic TIFF's missing tiles).
// Below level 0 OpenSlide draws an SVS's missing tile from the level above, and so must this reader.
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import t from 'tap';
import { openSlide } from '../../src/client/slide/open.js';
import { OpenSlideSlide } from '../../src/client/slide/openslide-slide.js';
import { startNginx } from '../../tools/remote-servers.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { breakTiles, unwriteTiles } from '../../tools/synthetic/tiff-tags.js';
import { ROOT, startServer, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, summaryRows, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('slide-sparse');
const [whole, sparse, holes, deeper] = ['whole', 'sparse', 'holes', 'deeper'].map((name) => join(dir, `${name}.svs`));
/** Tiles left unwritten in directory 0 (level 0): one in the tissue, one on the glass. */
const UNWRITTEN = [34, 1];

/** Zeroes the byte counts of the UNWRITTEN tiles of directory 0. */
const unwrite = (path: string) => unwriteTiles(path, UNWRITTEN);

/** Whether `got` is white on the UNWRITTEN tiles of a level `width` wide cut in `tile` px tiles,
 *  and equal to `unholed` everywhere else. */
function holed(got: Uint8Array, unholed: Uint8Array, width: number, tile: number): { white: boolean; same: boolean } {
  const across = Math.ceil(width / tile);
  const unwritten = new Set(UNWRITTEN);
  let [white, same] = [true, true];
  for (let i = 0; i < got.length; i++) {
    const pixel = Math.floor(i / 3);
    const [x, y] = [pixel % width, Math.floor(pixel / width)];
    if (unwritten.has(Math.floor(y / tile) * across + Math.floor(x / tile))) white &&= got[i] === 255;
    else same &&= got[i] === unholed[i];
  }
  return { white, same };
}

let server: TestServer;
let nginx: Awaited<ReturnType<typeof startNginx>>;

t.before(async () => {
  await writeSlide(whole, {
    widthUm: 1200,
    heightUm: 900,
    mpp: 0.5,
    seed: 33,
    format: 'svs',
    islands: [{ cx: 600, cy: 450, rx: 420, ry: 300 }],
  });
  copyFileSync(whole, sparse);
  unwrite(sparse);
  // Level 1 (directory 2, 3x2 tiles) loses two tiles in the tissue; level 2 (directory 3) its one
  // tile, to be drawn from level 1, itself drawn in part from level 0.
  copyFileSync(whole, holes);
  unwriteTiles(holes, [1, 4], 2);
  unwriteTiles(holes, [0], 3);
  // And a level 0 tile in the tissue (column 2, row 4 of 10 x 8), under level 1's tile 3, which
  // OpenSlide marks missing too ("tiles concatenating a missing tile are sometimes corrupt").
  copyFileSync(holes, deeper);
  unwriteTiles(deeper, [42], 0);
  nginx = await startNginx(dir);
  server = await startServer({
    models: [{ name: 'tissue-seg', instances: 1, intra_op_threads: 1 }, { name: 'gene-expr' }],
  });
});
t.teardown(async () => {
  await server?.stop();
  await nginx?.stop();
});

t.test('tiles never written are background, as OpenSlide draws them at level 0, here and over HTTP', async (t) => {
  const reference = OpenSlideSlide.open(sparse);
  const [local, remote, full] = [
    await openSlide(sparse),
    await openSlide(`${nginx.url}/sparse.svs`),
    await openSlide(whole),
  ];
  t.equal(local.reader, 'tiff');
  t.equal(remote.reader, 'tiff');
  const { width, height } = reference.levels[0];
  const tile = local.bandSource!(0);
  const [expected, here, there, unholed] = await Promise.all(
    [reference, local, remote, full].map((s) => s.readRegion(0, 0, 0, width, height)),
  );
  t.ok(Buffer.from(here).equals(Buffer.from(expected)), 'the local file: the pixels OpenSlide reads');
  t.ok(Buffer.from(there).equals(Buffer.from(expected)), 'over HTTP: the pixels OpenSlide reads');
  // OpenSlide's own reading, checked against the file before its tiles were unwritten: those
  // tiles white, every other pixel as it was.
  const check = holed(expected, unholed, width, tile.tileWidth);
  t.ok(check.white, 'the unwritten tiles are white');
  t.ok(check.same, 'every other tile is as in the whole file');
  // The overview, as tissue detection reads it from a sparse level: OpenSlide's pixels, shrunk.
  const [ow, oh] = [Math.ceil(width / 4), Math.ceil(height / 4)];
  const shrunk = await sharp(expected, { raw: { width, height, channels: 3 } })
    .resize(ow, oh, { kernel: 'linear', fit: 'fill' })
    .raw()
    .toBuffer();
  t.ok((await local.overview(0, ow, oh)).equals(shrunk), "the overview: OpenSlide's pixels, shrunk");
  t.ok((await remote.overview(0, ow, oh)).equals(shrunk), 'over HTTP too');
  // Without libturbojpeg (TILE_INFER_TURBOJPEG=0: as a host without it), the band holding a tile
  // never written goes to libvips' JPEG reader stream by stream: libvips' TIFF reader refuses it.
  const raw = join(dir, 'no-turbojpeg.rgb');
  execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const s = await (await import(${JSON.stringify(join(ROOT, 'dist/src/client/slide/open.js'))})).openSlide(process.argv[1]);
       const { width, height } = s.levels[0];
       (await import('node:fs')).writeFileSync(process.argv[2], await s.readRegion(0, 0, 0, width, height));`,
      sparse,
      raw,
    ],
    { env: { ...process.env, NODE_OPTIONS: '', TILE_INFER_TURBOJPEG: '0' } },
  );
  t.ok(readFileSync(raw).equals(Buffer.from(expected)), 'without libturbojpeg: the pixels OpenSlide reads');
  await Promise.all([reference, local, remote, full].map((s) => s.close()));
});

t.test(
  "an SVS's tiles never written below level 0 are drawn from the level above, as OpenSlide draws them",
  async (t) => {
    const reference = OpenSlideSlide.open(deeper);
    const [local, remote] = [await openSlide(deeper), await openSlide(`${nginx.url}/deeper.svs`)];
    for (const level of [1, 2]) {
      const { width, height } = reference.levels[level];
      const [expected, here, there] = await Promise.all(
        [reference, local, remote].map((s) => s.readRegion(level, 0, 0, width, height)),
      );
      // OpenSlide paints with cairo: not its pixels to the bit. White tiles, as before, were 29
      // (level 1) and 50 (level 2) from them on average; drawn from level 1 with a cubic kernel, 0.2 and 0.4.
      let [sum, max] = [0, 0];
      for (let i = 0; i < here.length; i++) {
        const d = Math.abs(here[i] - expected[i]);
        sum += d;
        max = Math.max(max, d);
      }
      t.ok(
        sum / here.length < 1 && max < 40,
        `level ${level}: mean |difference| ${(sum / here.length).toFixed(2)}, at most ${max}`,
      );
      t.ok(Buffer.from(there).equals(Buffer.from(here)), `level ${level} over HTTP: the same pixels`);
    }
    // Tissue detection reads the level nearest 8 µm/px, level 2 here: its overview is not glass.
    const { width, height } = local.levels[2];
    const overview = await local.overview(2, width, height);
    t.ok(overview.filter((v) => v < 200).length > overview.length / 10, 'level 2 shows the tissue');
    await Promise.all([reference, local, remote].map((s) => s.close()));
  },
);

t.test("an SVS's missing tile that cannot be drawn from the level above: said of that level", async (t) => {
  // The holed slide (level 1's tiles 1,0 and 1,1 and level 2's one tile never written) with every level 0
  // tile broken (its bytes zeros): level 1's hole cannot be drawn, nor level 2's from it.
  const broken = join(dir, 'broken.svs');
  copyFileSync(holes, broken);
  const source = await openSlide(holes);
  const { tilesAcross, tilesDown } = source.bandSource!(0);
  await source.close();
  breakTiles(
    broken,
    Array.from({ length: tilesAcross * tilesDown }, (_, i) => i),
    0,
  );
  const slide = await openSlide(broken);
  const { width, height } = slide.levels[1];
  await t.rejects(slide.readRegion(1, 0, 0, width, height), {
    code: 'TILE_ERR_SLIDE_UNREADABLE',
    message:
      /broken\.svs: level 1's tile 1,[01] is missing and could not be drawn from level 0: directory 0, .*VipsJpeg: Not a JPEG file/,
  });
  await slide.close();
  // tile-infer finds tissue on level 2: drawn from level 1, drawn from level 0.
  const out = join(dir, 'broken-out');
  const run = await tileInfer(slideCommand([broken], { model: 'gene-expr', out, server: server.url }));
  t.not(run.code, 0);
  const [row] = summaryRows(join(out, 'summary.csv'));
  t.match(row, {
    status: 'failed',
    reason:
      /^"?\[TILE_ERR_SLIDE_UNREADABLE\] \S+broken\.svs: level 2's tile 0,0 is missing and could not be drawn from level 1: level 1's tile 1,[01] is missing and could not be drawn from level 0: directory 0, /,
  });
});

t.test('a local LZW TIFF with tiles never written: those tiles white, the rest as written', async (t) => {
  const [lzw, holedLzw] = [join(dir, 'whole-lzw.tif'), join(dir, 'sparse-lzw.tif')];
  execFileSync('vips', ['tiffsave', whole, lzw, '--compression', 'lzw', '--tile', '--pyramid']);
  copyFileSync(lzw, holedLzw);
  unwrite(holedLzw);
  const [slide, full] = [await openSlide(holedLzw), await openSlide(lzw)];
  const { width, height } = slide.levels[0];
  const [got, unholed] = await Promise.all([slide, full].map((s) => s.readRegion(0, 0, 0, width, height)));
  const check = holed(got, unholed, width, slide.bandSource!(0).tileWidth);
  t.ok(check.white, 'the unwritten tiles are white');
  t.ok(check.same, 'every other tile is as libvips reads the whole file');
  const overview = await slide.overview(0, Math.ceil(width / 4), Math.ceil(height / 4));
  t.equal(overview.length, Math.ceil(width / 4) * Math.ceil(height / 4) * 3, 'its overview is read');
  await Promise.all([slide, full].map((s) => s.close()));
});

t.test('tile-infer runs over the sparse slide, here and over HTTP, to the same files', async (t) => {
  const [here, there] = [join(dir, 'local'), join(dir, 'remote')];
  const args = (slide: string, out: string) => slideCommand([slide], { model: 'gene-expr', out, server: server.url });
  const local = await tileInfer(args(sparse, here));
  t.equal(local.code, 0, local.stderr);
  const remote = await tileInfer(args(`${nginx.url}/sparse.svs`, there));
  t.equal(remote.code, 0, remote.stderr);
  const expected = outputs(here);
  const got = outputs(there);
  t.ok(expected.size >= 6, `${expected.size} files`);
  for (const [name, bytes] of expected) t.ok(got.get(name)?.equals(bytes), `${name} identical`);
});

t.test("tile-infer finds the tissue of an SVS with holes below level 0: the whole file's tiles", async (t) => {
  // Tissue is found on the level nearest 8 µm/px, level 2 here, whose one tile is a hole.
  const [fromHoles, fromWhole] = [join(dir, 'holes-out'), join(dir, 'whole-out')];
  const args = (slide: string, out: string) => slideCommand([slide], { model: 'gene-expr', out, server: server.url });
  const run = await tileInfer(args(holes, fromHoles));
  t.equal(run.code, 0, run.stderr);
  t.equal((await tileInfer(args(whole, fromWhole))).code, 0);
  // Each tile's row: its place and its predictions (level 0's tiles, which both files share).
  const rows = (folder: string, name: string) =>
    readFileSync(join(folder, 'predictions_gene-expr', `${name}.csv`), 'utf8').replaceAll(name, 'slide');
  const expected = rows(fromWhole, 'whole');
  t.ok(expected.split('\n').length > 20, `${expected.split('\n').length - 2} tiles`);
  t.equal(rows(fromHoles, 'holes'), expected, 'the same tiles and predictions');
});
