// The DICOM WSI reader on OrthancWSIDicomizer's output (Debian's orthanc-wsi) from a synthetic
// TIFF: the pyramid and its pixels against the TIFF's, frames placed by position (what the
// converter writes) and in TILED_FULL order (its per-frame positions removed with dcmtk's
// dcmodify), uncompressed frames with a level split across instances and one instance gone
// (background there), and the MPP cross-check.
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { openSlide } from '../../src/client/slide/open.js';
import type { Slide } from '../../src/client/slide/slide.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { dicomize } from '../../tools/orthanc.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('dicom-reader');
const tiff = join(dir, 's.tif');
// 1200 x 800 µm at 0.5 MPP: 2400 x 1600 pixels, 256-pixel tiles, levels 1, 4, 16.
const SWAPPED: [number, number] = [0.8, 1.2];

const pixels = (s: Slide, level = 0) => s.readRegion(level, 0, 0, s.levels[level].width, s.levels[level].height);

let reference: Slide;
t.before(async () => {
  await writeSlide(tiff, {
    widthUm: 1200,
    heightUm: 800,
    mpp: 0.5,
    seed: 5,
    format: 'tiff',
    islands: [{ cx: 600, cy: 400, rx: 400, ry: 300 }],
  });
  reference = await openSlide(tiff);
});
t.teardown(() => reference.close());

const same = async (t: Test, s: Slide) => {
  t.same(s.levels, reference.levels, 'the TIFF pyramid');
  t.equal(s.mpp, 0.5);
  for (const level of [0, 2])
    t.ok(
      Buffer.from(await pixels(s, level)).equals(Buffer.from(await pixels(reference, level))),
      `level ${level}: the TIFF's pixels`,
    );
};

t.test('frames placed by PlanePositionSlideSequence, and in TILED_FULL order', async (t) => {
  const folder = join(dir, 'sparse');
  await dicomize(tiff, folder, SWAPPED, ['--max-size', '0']);
  const sparse = await openSlide(folder);
  t.equal(sparse.reader, 'dicom');
  await same(t, sparse);
  await sparse.close();
  const full = join(dir, 'full');
  const files = await dicomize(tiff, full, SWAPPED, ['--max-size', '0']);
  for (const f of files) execFileSync('dcmodify', ['-nb', '-e', '(5200,9230)', '-i', '(0020,9311)=TILED_FULL', f]);
  const tiled = await openSlide(full);
  await same(t, tiled);
  await tiled.close();
});

t.test(
  'uncompressed frames (explicit VR little endian), one level across several instances; an instance gone is background',
  async (t) => {
    // The converter writes uncompressed frames in implicit VR; dcmconv +te rewrites them explicit.
    const folder = join(dir, 'raw');
    const files = await dicomize(tiff, folder, SWAPPED, [
      '--max-size',
      '1',
      '--compression',
      'none',
      '--reencode',
      '1',
    ]);
    for (const f of files) execFileSync('dcmconv', ['+te', f, f]);
    t.ok(files.length > 6, `${files.length} instances`);
    const raw = await openSlide(folder);
    t.equal(raw.mpp, 0.5);
    t.same(raw.levels[0], reference.levels[0]);
    const want = await pixels(reference);
    t.ok(Buffer.from(await pixels(raw)).equals(Buffer.from(want)), "level 0: the TIFF's pixels");
    await raw.close();
    rmSync(files[1]); // the second part of level 0
    const holed = await openSlide(folder);
    const got = await pixels(holed);
    let white = 0;
    let differ = 0;
    for (let i = 0; i < got.length; i += 3) {
      if (got[i] === 255 && got[i + 1] === 255 && got[i + 2] === 255) white++;
      if (got[i] !== want[i] || got[i + 1] !== want[i + 1] || got[i + 2] !== want[i + 2]) differ++;
    }
    t.ok(
      white >= 256 * 256 && white >= differ,
      `${white} white pixels where frames are gone, ${differ} differ from the TIFF`,
    );
    await holed.close();
  },
);

t.test("the converter's non-square PixelSpacing fails the MPP, naming both values", async (t) => {
  const folder = join(dir, 'wrong');
  await dicomize(tiff, folder, [1.2, 0.8], ['--max-size', '0']);
  const wrong = await openSlide(folder);
  t.equal(wrong.mpp, null);
  t.equal(wrong.mppErrorCode, 'TILE_ERR_SLIDE_MPP_CONFLICT');
  t.match(
    wrong.mppError,
    /PixelSpacing 0\.00075\d*\\0\.00033\d* mm \(row\\column\): pixels 0\.75 x 0\.3333 µm are not square; give the slide's MPP with --mpp/,
  );
  t.ok(readdirSync(folder).length >= 3);
  await wrong.close();
});
