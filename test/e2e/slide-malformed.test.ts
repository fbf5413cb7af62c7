// Malformed TIFFs, each a libvips- or tifffile-written slide with its bytes edited by tifffile: a
// chain of directories that loops (geotiff followed it without end, memory growing, locally and
// over HTTP), a TileOffsets count of 2^30 (geotiff's error named neither tag nor directory), and
// an OME-TIFF's SubIFDs listing one level 2,000 times or 33 levels (each parsed as a level, 21 s
// and 640 MB at 20,000), a SubIFD's counts of 2^33 and 2^40 (geotiff's allocation failures),
// and a tiled label whose TileOffsets lists too few tiles (it failed the whole slide: it is skipped
// with a warning). The reader says each with a TILE_ERR_* code, soon; in a cohort against
// the real service, the looping slide fails alone, here and from nginx, and the others are done.
import { execFileSync } from 'node:child_process';
import { copyFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeNullPackage } from '../../bench/null-models.js';
import { openSlide } from '../../src/client/slide/open.js';
import type { Slide } from '../../src/client/slide/slide.js';
import { TiffSlide } from '../../src/client/slide/tiff-slide.js';
import { startNginx } from '../../tools/remote-servers.js';
import {
  appendLabel,
  bigTiff,
  loopDirectories,
  omeSubIfds,
  repeatSubIfds,
  setCount,
} from '../../tools/synthetic/tiff-tags.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { tempDir } from '../../tools/temp-dir.js';
import { ROOT, startServer, type TestServer } from '../helpers/server.js';
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
  execFileSync('/usr/bin/python3', [
    join(ROOT, 'tools/synthetic/ome-tiff.py'),
    at('good.tif'),
    at('good.ome.tif'),
    '0.5',
  ]);
  variant('good.tif', 'loop.tif', loopDirectories);
  // A tiled label appended as directory 5 (after libvips' 5 levels), its TileOffsets listing 5 of
  // its 30 tiles (within the file: geotiff parses it).
  variant('good.tif', 'label.tif', (p) => {
    appendLabel(p);
    setCount(p, 'TileOffsets', 5, 5);
  });
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

t.test('a TileOffsets count of 2^30: the tag, the directory and the count expected', async (t) => {
  const path = variant('good.tif', 'count.tif', (p) => setCount(p, 'TileOffsets', 2 ** 30));
  t.match(await openError(path, (p) => TiffSlide.open(p)), {
    code: 'TILE_ERR_SLIDE_UNREADABLE',
    message:
      /count\.tif: directory 0: TileOffsets \(tag 324\) lists 1073741824 values, expected one a tile: \d+ \(\d+x\d+ tiles of \d+x\d+\)/,
  });
});

t.test('BigTIFF counts of 2^33 and 2^40: the tag, the directory and the count, here and over HTTP', async (t) => {
  bigTiff(at('big.tif'));
  const good = await TiffSlide.open(at('big.tif'));
  t.same(
    good.levels.map((l) => [l.width, l.height]),
    [[64, 64]],
    'the file as tifffile wrote it opens',
  );
  await good.close();
  // geotiff allocates an array of a tag's count as it parses the directory: before the walk
  // checked them, each failed TILE_ERR_SLIDE_FORMAT "not a readable TIFF (Invalid array length)".
  const cases = [
    [
      'offsets.tif',
      'TileOffsets',
      2 ** 33,
      /directory 0: TileOffsets \(tag 324\) lists 8589934592 values, expected one a tile: 16 \(4x4 tiles of 16x16\)$/,
    ],
    [
      'counts.tif',
      'TileByteCounts',
      2 ** 40,
      /directory 0: TileByteCounts \(tag 325\) lists 1099511627776 values, expected one a tile: 16 \(4x4 tiles of 16x16\)$/,
    ],
    [
      'text.tif',
      'ImageDescription',
      2 ** 40,
      /directory 0: tag 270 \(type 2\) lists 1099511627776 values, 1099511627776 bytes, more than the file's \d+; expected its values to lie in the file$/,
    ],
  ] as const;
  for (const [name, tag, count, message] of cases) {
    const path = variant('big.tif', name, (p) => setCount(p, tag, count));
    t.match(await openError(path, (p) => TiffSlide.open(p)), { code: 'TILE_ERR_SLIDE_UNREADABLE', message }, name);
  }
  t.match(
    await openError(`${nginx.url}/offsets.tif`),
    {
      code: 'TILE_ERR_SLIDE_UNREADABLE',
      message: new RegExp(`^${nginx.url}/offsets\\.tif: directory 0: TileOffsets \\(tag 324\\)`),
    },
    'over HTTP',
  );
});

t.test(
  "an OME-TIFF's SubIFDs: one level listed 2,000 times is one level; 64 levels open, 65 are refused",
  async (t) => {
    const good = await TiffSlide.open(at('good.ome.tif'));
    const levels = good.levels;
    await good.close();
    const path = variant('good.ome.tif', 'repeated.ome.tif', (p) => repeatSubIfds(p, 2000));
    const started = performance.now();
    const repeated = await TiffSlide.open(path);
    t.same(repeated.levels, levels.slice(0, 2), 'level 0 and its first reduced level');
    await repeated.close();
    const ms = performance.now() - started;
    t.ok(ms < 3000, `opened in ${ms.toFixed(0)} ms`);
    // 64: QuPath writes a pyramid of gentle steps (scaledDownsampling(1.1): 62 reduced levels
    // of a 200,000 px slide), which 32 refused.
    omeSubIfds(at('gentle.ome.tif'), 64);
    const gentle = await TiffSlide.open(at('gentle.ome.tif'));
    t.equal(gentle.levels.length, 65, 'level 0 and 64 reduced levels');
    await gentle.close();
    omeSubIfds(at('many.ome.tif'), 65);
    t.match(await openError(at('many.ome.tif'), (p) => TiffSlide.open(p)), {
      code: 'TILE_ERR_SLIDE_UNREADABLE',
      message: /many\.ome\.tif: directory 0's SubIFDs \(tag 330\) lists 65 reduced levels, expected at most 64/,
    });
  },
);

t.test(
  "counts of 2^33 and 2^40 in an OME-TIFF's SubIFD: the tag, the SubIFD and the count, here and over HTTP",
  async (t) => {
    // tifffile's BigTIFF OME-TIFF, one reduced level in a SubIFD of directory 0. Before the walk
    // read SubIFDs, geotiff met these counts as it parsed the level: TILE_ERR_SLIDE_FORMAT "not a
    // readable TIFF (Invalid array length)", and "(Array buffer allocation failed)".
    omeSubIfds(at('sub.ome.tif'), 1, true);
    const good = await TiffSlide.open(at('sub.ome.tif'));
    t.same(
      good.levels.map((l) => [l.width, l.height]),
      [
        [64, 64],
        [32, 32],
      ],
      'the file as tifffile wrote it opens, its SubIFD a level',
    );
    await good.close();
    const cases = [
      [
        'sub-offsets.ome.tif',
        'TileOffsets',
        2 ** 33,
        /directory 0, SubIFD 0: TileOffsets \(tag 324\) lists 8589934592 values, expected one a tile: 4 \(2x2 tiles of 16x16\)$/,
      ],
      [
        'sub-bits.ome.tif',
        'BitsPerSample',
        2 ** 40,
        /directory 0, SubIFD 0: tag 258 \(type 3\) lists 1099511627776 values, 2199023255552 bytes, more than the file's \d+; expected its values to lie in the file$/,
      ],
    ] as const;
    for (const [name, tag, count, message] of cases) {
      const path = variant('sub.ome.tif', name, (p) => setCount(p, tag, count, 0, 0));
      t.match(await openError(path, (p) => TiffSlide.open(p)), { code: 'TILE_ERR_SLIDE_UNREADABLE', message }, name);
    }
    t.match(
      await openError(`${nginx.url}/sub-offsets.ome.tif`),
      {
        code: 'TILE_ERR_SLIDE_UNREADABLE',
        message: new RegExp(`^${nginx.url}/sub-offsets\\.ome\\.tif: directory 0, SubIFD 0: TileOffsets \\(tag 324\\)`),
      },
      'over HTTP',
    );
  },
);

t.test(
  "a plain TIFF's SubIFDs are never read, so not checked; an OME-TIFF's listing 2^22 is refused by its count",
  async (t) => {
    // tifffile's BigTIFF with a SubIFD but no OME-XML: only OME-TIFFs' SubIFDs are levels here.
    omeSubIfds(at('plain-sub.tif'), 1, true, false);
    const path = variant('plain-sub.tif', 'plain-sub-offsets.tif', (p) => setCount(p, 'TileOffsets', 2 ** 33, 0, 0));
    const plain = await TiffSlide.open(path);
    t.same(
      plain.levels.map((l) => [l.width, l.height]),
      [[64, 64]],
      'its main image opens, its broken SubIFD unread (it was refused when every TIFF was walked)',
    );
    await plain.close();
    // The list itself is not read: a count past 16 x 64 is refused as it stands (a sparse file made
    // long enough for it; 2^28 read 2 GB and held 2.4 GB before this).
    const many = variant('sub.ome.tif', 'listed.ome.tif', (p) => {
      setCount(p, 'SubIFDs', 2 ** 22, 0);
      truncateSync(p, 2 ** 26);
    });
    t.match(await openError(many, (p) => TiffSlide.open(p)), {
      code: 'TILE_ERR_SLIDE_UNREADABLE',
      message: /listed\.ome\.tif: directory 0's SubIFDs \(tag 330\) lists 4194304 offsets, expected at most 64/,
    });
  },
);

t.test(
  'a label with a wrong tile count: skipped with a warning, the pyramid read as before, here and over HTTP',
  async (t) => {
    const good = await TiffSlide.open(at('good.tif'));
    t.equal(good.levels.length, 5, "libvips' five levels");
    const region = await good.readRegion(0, 100, 100, 256, 256);
    t.same(good.warnings, [], 'no warning without the label');
    await good.close();
    for (const path of [at('label.tif'), `${nginx.url}/label.tif`]) {
      const slide = await openSlide(path);
      t.same(slide.levels, good.levels, `${path}: the same pyramid`);
      t.same(slide.warnings, [
        'warning: directory 5 (ImageDescription: label), not a pyramid level (a label, macro or thumbnail image), was skipped: TileOffsets (tag 324) lists 5 values, expected one a tile: 30 (10x3 tiles of 16x16)',
      ]);
      t.ok(
        Buffer.from(await slide.readRegion(0, 100, 100, 256, 256)).equals(Buffer.from(region)),
        `${path}: the same pixels`,
      );
      await slide.close();
    }
  },
);

t.test('a cohort with looping slides, here and from nginx: they fail alone, the others are done', async (t) => {
  server = await startServer({
    models: [
      { name: 'tissue-seg', instances: 1, intra_op_threads: 1 },
      { name: 'null-224', path: writeNullPackage(tempDir('malformed-models'), 224), max_batch: 1 },
    ],
  });
  const manifest = at('cohort.csv');
  writeFileSync(manifest, ['wsi', 'loop.tif', `${nginx.url}/loop-remote.tif`, 'good.tif', 'label.tif', ''].join('\n'));
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
    {
      slide: 'label.tif',
      status: 'done',
      reason: /warning: directory 5 \(ImageDescription: label\), not a pyramid level/,
    },
  ]);
  const rows = summaryRows(join(out, 'summary.csv'));
  t.ok(Number(rows[3].tiles) > 0, `${rows[3].tiles} tiles`);
  t.equal(rows[3].tiles, rows[2].tiles, "the label's slide gives the tiles of the slide without it");
});
