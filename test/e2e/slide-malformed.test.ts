// Malformed TIFFs, each a libvips-written slide with its bytes edited by tifffile: a chain of
// directories that loops (geotiff followed it without end, memory growing, locally and over
// HTTP). The reader says so with a TILE_ERR_* code, at once; in a cohort against the real
// service, the looping slide fails alone, here and from nginx, and the others are done.
import { execFileSync } from 'node:child_process';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeNullPackage } from '../../bench/null-models.js';
import { openSlide } from '../../src/client/slide/open.js';
import type { Slide } from '../../src/client/slide/slide.js';
import { startNginx } from '../../tools/remote-servers.js';
import { loopDirectories } from '../../tools/synthetic/tiff-tags.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { tempDir } from '../../tools/temp-dir.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { slideCommand, smallSlide, summaryRows, tileInfer } from '../helpers/tile-infer.js';

const dir = tempDir('slide-malformed');
const at = (name: string) => join(dir, name);
let nginx: Awaited<ReturnType<typeof startNginx>>;
let server: TestServer;

/** A copy of `from` at `name`, edited by `edit`. */
function variant(from: string, name: string, edit: (path: string) => unknown): string {
  copyFileSync(at(from), at(name));
  edit(at(name));
  return at(name);
}

/** The error opening `path` gives (by default as tile-infer opens it: through OpenSlide too, a
 *  URL by range requests), or a failure if it opens or takes more than `ms`. */
async function openError(path: string, open: (path: string) => Promise<Slide> = openSlide, ms = 10_000) {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${path}: still opening after ${ms} ms`)), ms);
  });
  try {
    await Promise.race([open(path).then((s) => s.close()), late]);
    return new Error(`${path}: opened`);
  } catch (err) {
    return err as Error;
  } finally {
    clearTimeout(timer);
  }
}

t.before(async () => {
  // Our writer's slide, made a JPEG pyramid by libvips (level 0 read, the levels below its own).
  await writeSlide(at('ours.tif'), smallSlide(1));
  execFileSync('vips', ['tiffsave', at('ours.tif'), at('good.tif'), '--compression', 'jpeg', '--tile', '--pyramid']);
  variant('good.tif', 'loop.tif', loopDirectories);
  copyFileSync(at('loop.tif'), at('loop-remote.tif')); // another name: outputs named by the slide's
  nginx = await startNginx(dir);
});
t.teardown(async () => {
  await nginx?.stop();
  await server?.stop();
});

t.test('a chain of directories that loops: refused at once, here and over HTTP', async (t) => {
  for (const path of [at('loop.tif'), `${nginx.url}/loop-remote.tif`]) {
    const err = await openError(path);
    t.match(
      err,
      {
        code: 'TILE_ERR_SLIDE_UNREADABLE',
        message:
          /^\S+loop(-remote)?\.tif: directory \d+ points back to directory 0 \(its next-directory offset is \d+\): the TIFF's chain of directories loops/,
      },
      path,
    );
  }
});

t.test('a cohort with looping slides, here and from nginx: they fail alone, the others are done', async (t) => {
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'null-224', path: writeNullPackage(tempDir('malformed-models'), 224), max_batch: 1 },
    ],
  });
  const manifest = at('cohort.csv');
  writeFileSync(manifest, ['wsi', 'loop.tif', `${nginx.url}/loop-remote.tif`, 'good.tif', ''].join('\n'));
  const out = at('out');
  const run = await tileInfer(slideCommand([manifest], { model: 'null-224', out, server: server.url }), {
    timeoutMs: 120_000,
  });
  t.equal(run.code, 3, `exit 3: some slides failed\n${run.stderr}`);
  t.match(summaryRows(join(out, 'summary.csv')), [
    {
      slide: 'loop.tif',
      status: 'failed',
      reason: /TILE_ERR_SLIDE_UNREADABLE.*directory \d+ points back to directory 0/,
    },
    {
      slide: `${nginx.url}/loop-remote.tif`,
      status: 'failed',
      reason: /TILE_ERR_SLIDE_UNREADABLE.*directory \d+ points back to directory 0/,
    },
    { slide: 'good.tif', status: 'done' },
  ]);
});
