// OME-TIFF: the OME-XML in the first ImageDescription gives the pixel size (PhysicalSizeX/Y with
// their units, micrometres when none is given); a pyramid's reduced levels are SubIFDs of the
// full-resolution directory (tifffile, bioformats2raw/raw2ometiff, QuPath, vips write them so).
import { GeoTIFFImage, type GeoTIFF } from 'geotiff';
import { checkedMpp, SlideError } from './slide.js';

export const isOmeXml = (description: string | undefined) => !!description && /<(\w+:)?OME[\s>]/.test(description);

/** Micrometres per unit of OME's UnitsLength. */
const MICRONS: Record<string, number> = {
  m: 1e6,
  dm: 1e5,
  cm: 1e4,
  mm: 1e3,
  µm: 1,
  μm: 1,
  um: 1,
  nm: 1e-3,
  pm: 1e-6,
  Å: 1e-4,
  in: 25400,
  thou: 25.4,
  mil: 25.4,
};

/** The MPP the first image's Pixels element records, checked; null when it records none. */
export function omeMpp(xml: string, path: string): { mpp: number; error: null } | { mpp: null; error: string } | null {
  const pixels = /<(?:\w+:)?Pixels\b([^>]*)>/.exec(xml)?.[1];
  if (!pixels) return null;
  const attr = (name: string) => new RegExp(`\\b${name}="([^"]*)"`).exec(pixels)?.[1];
  const sizes = (['X', 'Y'] as const).map((axis) => {
    const value = attr(`PhysicalSize${axis}`);
    const unit = attr(`PhysicalSize${axis}Unit`) ?? 'µm';
    return { axis, value, unit, microns: value === undefined ? NaN : Number(value) * (MICRONS[unit] ?? NaN) };
  });
  const [x, y] = sizes;
  if (x.value === undefined) return null;
  const said = sizes.map((s) => `PhysicalSize${s.axis}="${s.value}" ${s.unit}`).join(', ');
  const bad = sizes.find((s) => s.value !== undefined && !(s.unit in MICRONS));
  if (bad)
    return {
      mpp: null,
      error: `${path}: the OME-XML gives ${said}: unit "${bad.unit}" is not a length this reader converts (m to pm, Å, in); give the slide's MPP with --mpp`,
    };
  if (y.value !== undefined && Math.abs(x.microns - y.microns) > 0.01 * x.microns) {
    return {
      mpp: null,
      error: `${path}: the OME-XML gives ${said}: pixels that are not square; give the slide's MPP with --mpp`,
    };
  }
  return checkedMpp(x.microns, `the OME-XML's ${said}`, path);
}

/** Reduced levels a pyramid may have. A pyramid whose levels each halve has at most 32 below
 *  TIFF's 2^32 pixels (bfconvert's -pyramid-scale is an integer, so it halves or more), but
 *  writers take gentler steps: QuPath's OMEPyramidWriter takes any downsamples or a scale such as
 *  1.1 (a 200,000 px slide down to its 512 px tile then has 62 reduced levels), tifffile any
 *  count of SubIFDs. 64 keeps those and still bounds the cost (a level is a directory parsed and
 *  a tile grid, a few ms): a SubIFDs tag listing more is refused, not parsed level by level
 *  (20,000 entries took 21 s and 640 MB). */
export const MAX_REDUCED_LEVELS = 64;

/** A SubIFDs tag may list an offset more than once (taken once), but no more than this many
 *  offsets in all (512 KiB of BigTIFF's 8-byte ones): a longer list is refused by its count,
 *  before it is read. */
const MAX_LISTED = 1 << 16;

const tooManyLevels = (path: string, said: string) =>
  new SlideError(
    'TILE_ERR_SLIDE_UNREADABLE',
    `${path}: directory 0's SubIFDs (tag 330) lists ${said}, expected at most ${MAX_REDUCED_LEVELS} (a pyramid halving from TIFF's largest size, 2^32 pixels, to one pixel has 32; one of gentler steps a few more)`,
  );

/** Refuses a SubIFDs tag by its count (`count` offsets), before its list is read. */
export function listedLevels(count: number, path: string): void {
  if (count > MAX_LISTED) throw tooManyLevels(path, `${count} offsets`);
}

/** The reduced levels a SubIFDs tag lists (`listed`, their offsets), an offset listed twice once:
 *  more than MAX_REDUCED_LEVELS are refused, not parsed level by level (by subImages, and before
 *  it by tiff-slide.ts' walk of the directories, which checks each one's tags). */
export function reducedLevels(listed: ArrayLike<number | bigint>, path: string): number[] {
  listedLevels(listed.length, path);
  const offsets = [...new Set(Array.from(listed, Number))];
  if (offsets.length > MAX_REDUCED_LEVELS) throw tooManyLevels(path, `${offsets.length} reduced levels`);
  return offsets;
}

/** The SubIFDs of `image` (its reduced levels), as images. */
export async function subImages(tiff: GeoTIFF, image: GeoTIFFImage, path: string): Promise<GeoTIFFImage[]> {
  const dir = image.fileDirectory;
  if (!dir.hasTag('SubIFDs')) return [];
  const offsets = reducedLevels((await dir.loadValue('SubIFDs')) as ArrayLike<number | bigint>, path);
  return Promise.all(
    offsets.map(
      async (offset) =>
        new GeoTIFFImage(await tiff.parser.parseFileDirectoryAt(offset), tiff.littleEndian, tiff.cache, tiff.source),
    ),
  );
}
