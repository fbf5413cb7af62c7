// The OpenSlide path (libopenslide0, installed by .ci/run) on a generated Aperio SVS: the same
// levels, MPP and pixels as the built-in reader, and openSlide() handing it what the TIFF reader
// is not given.
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openSlide } from '../src/client/slide/open.js';
import { OpenSlideSlide, openSlideLibrary } from '../src/client/slide/openslide-slide.js';
import { TiffSlide } from '../src/client/slide/tiff-slide.js';
import { writeSlide } from '../tools/synthetic/slide.js';
import { tempDir } from '../tools/temp-dir.js';

t.test('OpenSlide reads an SVS as the built-in reader does', async (t) => {
  t.ok(openSlideLibrary(), 'libopenslide is installed');
  const dir = tempDir('openslide');
  const path = join(dir, 's.svs');
  await writeSlide(path, {
    widthUm: 640,
    heightUm: 400,
    mpp: 0.25,
    seed: 5,
    format: 'svs',
    islands: [{ cx: 300, cy: 200, rx: 200, ry: 120 }],
  });
  const viaOpenSlide = OpenSlideSlide.open(path);
  const builtIn = await TiffSlide.open(path);
  t.teardown(async () => {
    await viaOpenSlide.close();
    await builtIn.close();
  });
  t.same(viaOpenSlide.levels, builtIn.levels);
  t.equal(viaOpenSlide.mpp, 0.25);
  for (const level of [0, 1, 2]) {
    const a = await viaOpenSlide.readRegion(level, 10, 9, 150, 130);
    const b = await builtIn.readRegion(level, 10, 9, 150, 130);
    t.ok(Buffer.from(a).equals(Buffer.from(b)), `level ${level}: identical pixels`);
  }
  const past = await viaOpenSlide.readRegion(2, 150, 0, 20, 1);
  t.same(Array.from(past.subarray(30)), new Array(30).fill(255), 'white past the edge');

  // A file the TIFF reader is not given (OpenSlide detects the format from the content).
  const other = join(dir, 's.slide');
  copyFileSync(path, other);
  const opened = await openSlide(other);
  t.equal(opened.reader, 'openslide');
  await opened.close();
});
