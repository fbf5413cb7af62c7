// A sparse SVS: JPEG tiles its TIFF directory says were never written (TileByteCounts 0), made
// by tifffile from a libvips-written SVS. OpenSlide draws such a tile transparent (over white:
// background); this reader, here and over HTTP (a real nginx), must read the same pixels, and
// tile-infer must run over the slide, where before the band holding the tile failed ("a JPEG
// stream of 0 bytes") and libvips refuses any region that touches it.
import { execFileSync } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openSlide } from '../../src/client/slide/open.js';
import { OpenSlideSlide } from '../../src/client/slide/openslide-slide.js';
import { startNginx } from '../../tools/remote-servers.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { outputs, slideCommand, tileInfer } from '../helpers/tile-infer.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('slide-sparse');
const [whole, sparse] = [join(dir, 'whole.svs'), join(dir, 'sparse.svs')];
/** Tiles left unwritten in directory 0 (level 0): one in the tissue, one on the glass. */
const UNWRITTEN = [34, 1];

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
  execFileSync('/usr/bin/python3', [
    '-c',
    'import sys, tifffile\nwith tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n page = f.pages[0]\n assert page.compression == 7, page.compression\n tag = page.tags["TileByteCounts"]\n counts = list(tag.value)\n for i in sys.argv[2:]: counts[int(i)] = 0\n tag.overwrite(counts)',
    sparse,
    ...UNWRITTEN.map(String),
  ]);
  nginx = await startNginx(dir);
  server = await startServer({
    models: [{ name: 'tissue-seg', instances: 1, intra_op_threads: 1 }, { name: 'gene-expr' }],
  });
});
t.teardown(async () => {
  await server?.stop();
  await nginx?.stop();
});

t.test('tiles never written are background, as OpenSlide draws them, here and over HTTP', async (t) => {
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
  const unwritten = new Set(UNWRITTEN);
  let [white, same] = [true, true];
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 3;
      const k = Math.floor(y / tile.tileHeight) * tile.tilesAcross + Math.floor(x / tile.tileWidth);
      for (let c = 0; c < 3; c++)
        if (unwritten.has(k)) white &&= expected[i + c] === 255;
        else same &&= expected[i + c] === unholed[i + c];
    }
  t.ok(white, 'the unwritten tiles are white');
  t.ok(same, 'every other tile is as in the whole file');
  // The overview tissue detection reads: the local level, decoded here, equals OpenSlide's.
  const [ow, oh] = [Math.ceil(width / 4), Math.ceil(height / 4)];
  t.ok(
    (await local.overview(0, ow, oh)).equals(await remote.overview(0, ow, oh)),
    'the overview here and over HTTP is one',
  );
  await Promise.all([reference, local, remote, full].map((s) => s.close()));
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
