// The DICOM WSI reader on OrthancWSIDicomizer's output (Debian's orthanc-wsi) from a synthetic
// TIFF: the pyramid and its pixels against the TIFF's, frames placed by position (what the
// converter writes) and in TILED_FULL order (its per-frame positions removed with dcmtk's
// dcmodify), uncompressed frames with a level split across instances and one instance gone
// (background there), and the MPP cross-check.
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
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
  'uncompressed frames (explicit VR little endian), one level across several instances; a part gone fails, naming it',
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
    // The second part of level 0's concatenation gone (a partial copy): its frames are not drawn
    // as background, the gap in the parts' numbering fails the slide.
    const dump = (f: string, tag: string) => execFileSync('dcmdump', ['+P', tag, f]).toString();
    const offset = (f: string) => Number(/UL (\d+)/.exec(dump(f, '0020,9228'))![1]);
    const [second, third] = [offset(files[1]), offset(files[2])];
    rmSync(files[1]);
    await t.rejects(openSlide(folder), {
      code: 'TILE_ERR_SLIDE_UNREADABLE',
      message: new RegExp(
        `^${folder}: level 0 \\(2400x1600 pixels\\) is split across instances \\(ConcatenationUID [0-9.]+\\): part 2 \\(frames ${second + 1} to ${third}\\) is missing, the next there being InConcatenationNumber \\(0020,9162\\) 3, ConcatenationFrameOffsetNumber \\(0020,9228\\) ${third}, ${files[2]}: a partial copy`,
      ),
    });
    // Declared TILED_FULL (every tile a frame), its concatenation's numbering removed: the tiles
    // left without a frame fail it.
    const level0 = files.filter((f) => f !== files[1] && /UL 2400 /.test(dump(f, '0048,0006')));
    for (const f of level0)
      execFileSync('dcmodify', ['-nb', '-e', '(0020,9161)', '-e', '(0020,9162)', '-i', '(0020,9311)=TILED_FULL', f]);
    await t.rejects(openSlide(folder), {
      code: 'TILE_ERR_SLIDE_UNREADABLE',
      message:
        /level 0 \(2400x1600 pixels\) is TILED_FULL \(DimensionOrganizationType \(0020,9311\)\), every tile a frame, but its \d+ instance\(s\) hold no frame for tile \d+,\d+/,
    });
    // TILED_SPARSE, frames where their positions put them, no concatenation (nothing says a part
    // is gone): a tile no frame covers is background, as the standard has it.
    for (const f of level0) execFileSync('dcmodify', ['-nb', '-i', '(0020,9311)=TILED_SPARSE', f]);
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

t.test(
  'damaged sizes and frame counts fail coded, naming the file and the attribute, before any allocation',
  async (t) => {
    const whole = join(dir, 'counts');
    const [level0] = await dicomize(tiff, whole, SWAPPED, ['--max-size', '0']);
    const damaged = (name: string, ...edits: string[]) => {
      const folder = join(dir, name);
      cpSync(whole, folder, { recursive: true });
      const file = join(folder, basename(level0));
      execFileSync('dcmodify', ['-nb', ...edits, file]);
      return { folder, file };
    };
    const cases: [string, string[], string, RegExp][] = [
      [
        'columns',
        ['-m', '(0048,0006)=4294967295', '-m', '(0048,0007)=4294967295'],
        'TILE_ERR_SLIDE_FORMAT',
        /: TotalPixelMatrixColumns x Rows \(0048,0006\/0007\) 4294967295x4294967295 in 256x256 frames is 16777216x16777216 tiles; expected at most 2000000 pixels a side/,
      ],
      [
        'negative',
        ['-m', '(0028,0008)=-5'],
        'TILE_ERR_SLIDE_UNREADABLE',
        /: NumberOfFrames \(0028,0008\) is -5, expected a whole number from 1$/,
      ],
      [
        'huge',
        ['-m', '(0028,0008)=2147483647'],
        'TILE_ERR_SLIDE_UNREADABLE',
        /: NumberOfFrames \(0028,0008\) is 2147483647, but PerFrameFunctionalGroupsSequence \(5200,9230\) has \d+ items, one a frame: frame \d+ is missing$/,
      ],
      // No per-frame groups to check it by: bounded by the bytes the file has for frames.
      [
        'huge-full',
        ['-m', '(0028,0008)=2147483647', '-e', '(5200,9230)'],
        'TILE_ERR_SLIDE_UNREADABLE',
        /: NumberOfFrames \(0028,0008\) is 2147483647, but its pixel data \(from byte \d+ of \d+\) has room for at most \d+ frames$/,
      ],
    ];
    for (const [name, edits, code, message] of cases) {
      const { folder, file } = damaged(name, ...edits);
      const opened = openSlide(folder);
      await t.rejects(opened, { code, message }, name);
      await opened.catch((err: Error) => t.ok(err.message.startsWith(file), `${name}: names ${file}`));
    }
  },
);
