// A DICOM WSI series as a slide pyramid (PS3.3 A.32.8, VL Whole Slide Microscopy Image IOD), the
// same for files and DICOMweb: VOLUME instances grouped by their total pixel matrix size are the
// levels (one level may be split across several instances); LABEL, OVERVIEW and THUMBNAIL
// images are kept apart. Each tile of a level is a frame of one instance: in TILED_FULL order,
// or where the frame's PlanePositionSlideSequence puts it (TILED_SPARSE); tiles no frame covers
// are background.
import type { CodesOf } from '../../../lib/errors.js';
import { checkedMpp, MAX_SLIDE_UM, MPP_RANGE, SlideError, type FrameCoding, type SlideLevel } from '../slide.js';
import type { Attrs } from './attributes.js';

export const WSI_SOP_CLASS = '1.2.840.10008.5.1.4.1.1.77.1.6';
const SOP_CLASS_NAMES: Record<string, string> = {
  '1.2.840.10008.5.1.4.1.1.7': 'Secondary Capture Image',
  '1.2.840.10008.5.1.4.1.1.77.1.2': 'VL Microscopic Image',
  '1.2.840.10008.5.1.4.1.1.77.1.3': 'VL Slide-Coordinates Microscopic Image',
  '1.2.840.10008.5.1.4.1.1.2': 'CT Image',
  '1.2.840.10008.5.1.4.1.1.4': 'MR Image',
  '1.2.840.10008.5.1.4.1.1.66.4': 'Segmentation',
  '1.2.840.10008.5.1.4.1.1.91.1': 'Microscopy Bulk Simple Annotations',
};
export const sopClassName = (uid: string) => `${uid}${SOP_CLASS_NAMES[uid] ? ` (${SOP_CLASS_NAMES[uid]})` : ''}`;

export const JPEG_BASELINE = '1.2.840.10008.1.2.4.50';
export const EXPLICIT_LE = '1.2.840.10008.1.2.1';
const SYNTAX_NAMES: Record<string, string> = {
  '1.2.840.10008.1.2': 'Implicit VR Little Endian',
  '1.2.840.10008.1.2.2': 'Explicit VR Big Endian',
  '1.2.840.10008.1.2.4.51': 'JPEG Extended',
  '1.2.840.10008.1.2.4.57': 'JPEG Lossless',
  '1.2.840.10008.1.2.4.70': 'JPEG Lossless SV1',
  '1.2.840.10008.1.2.4.80': 'JPEG-LS Lossless',
  '1.2.840.10008.1.2.4.81': 'JPEG-LS Near-Lossless',
  '1.2.840.10008.1.2.4.90': 'JPEG 2000 Lossless',
  '1.2.840.10008.1.2.4.91': 'JPEG 2000',
  '1.2.840.10008.1.2.4.201': 'HTJ2K Lossless',
  '1.2.840.10008.1.2.4.203': 'HTJ2K',
  '1.2.840.10008.1.2.5': 'RLE Lossless',
};

/** How a level's frames are coded: JPEG baseline or JPEG 2000 codestreams, or RGB pixels. */
type DicomCoding = Extract<FrameCoding, 'jpeg' | 'j2k' | 'raw'>;
const J2K = new Set(['1.2.840.10008.1.2.4.90', '1.2.840.10008.1.2.4.91']);

const TAG = {
  sopClass: '00080016',
  imageType: '00080008',
  series: '0020000E',
  concatenationUid: '00209161',
  concatenationPart: '00209162',
  concatenationParts: '00209163',
  concatenationOffset: '00209228',
  dimensionOrganization: '00209311',
  samples: '00280002',
  photometric: '00280004',
  planar: '00280006',
  frames: '00280008',
  rows: '00280010',
  columns: '00280011',
  pixelSpacing: '00280030',
  bitsAllocated: '00280100',
  pixelMeasures: '00289110',
  imagedWidth: '00480001',
  imagedHeight: '00480002',
  totalColumns: '00480006',
  totalRows: '00480007',
  planePosition: '0048021A',
  columnPosition: '0048021E',
  rowPosition: '0048021F',
  shared: '52009229',
  perFrame: '52009230',
} as const;

/** One instance of the series, wherever it came from. */
export interface Instance {
  attrs: Attrs;
  /** Its file or URL, for messages. */
  where: string;
  transferSyntax: string | undefined;
}

export interface DicomLevel extends SlideLevel {
  tileWidth: number;
  tileHeight: number;
  tilesAcross: number;
  tilesDown: number;
  coding: DicomCoding;
  /** Its instances (indices into the series' instances). */
  members: number[];
  /** Per tile (row-major): the instance (index into the series' instances) holding its frame,
   *  -1 for background; and the frame's number in it, from 0. */
  instance: Int32Array;
  frame: Int32Array;
}

export interface Pyramid {
  series: string;
  levels: DicomLevel[];
  /** LABEL, OVERVIEW and THUMBNAIL images: not tiled. */
  associated: { type: string; instance: number }[];
  mpp: number | null;
  mppError: string | null;
  mppErrorCode: CodesOf<'SLIDE'> | null;
}

/** A level's largest side: a glass slide (MAX_SLIDE_UM) at the finest MPP read; and its most
 *  tiles (two Int32Arrays of them, 256 MB): 14 times a 100 mm square slide's at 0.25 µm/px in
 *  256-pixel frames. */
const MAX_SIDE = MAX_SLIDE_UM / MPP_RANGE[0];
const MAX_TILES = 2 ** 25;

const fail = (code: CodesOf<'SLIDE'>, message: string): never => {
  throw new SlideError(code, message);
};

export const seriesOf = (i: Instance) => i.attrs.text(TAG.series) ?? '';

/** The series' instances as one slide (`label`, for messages): the instances of other SOP
 *  classes left out, one series only. */
export function wsiInstances<T extends Instance>(label: string, all: T[]): T[] {
  const wsi = all.filter((i) => i.attrs.text(TAG.sopClass) === WSI_SOP_CLASS);
  if (!wsi.length) {
    const classes = [...new Set(all.map((i) => i.attrs.text(TAG.sopClass) ?? 'none'))].map(sopClassName).join(', ');
    fail(
      'TILE_ERR_SLIDE_FORMAT',
      `${label}: not a DICOM whole-slide image: SOP class ${classes}, expected ${WSI_SOP_CLASS} (VL Whole Slide Microscopy Image)`,
    );
  }
  const series = new Map<string, number>();
  for (const i of wsi) series.set(seriesOf(i), (series.get(seriesOf(i)) ?? 0) + 1);
  if (series.size > 1) {
    const list = [...series].map(([uid, n]) => `${uid} (${n} instance${n > 1 ? 's' : ''})`).join(' and ');
    fail(
      'TILE_ERR_SLIDE_SERIES',
      `${label}: holds ${series.size} DICOM series, ${list}; a slide is one series: give one series' folder, or one of its instances`,
    );
  }
  return wsi;
}

/** The image type's third value: VOLUME, LABEL, OVERVIEW or THUMBNAIL (VOLUME when absent). */
const flavour = (i: Instance) => (i.attrs.text(TAG.imageType, 2) ?? 'VOLUME').trim().toUpperCase();

function coding(i: Instance, label: string): DicomCoding {
  const syntax = i.transferSyntax;
  const a = i.attrs;
  if (syntax === JPEG_BASELINE) return 'jpeg';
  if (syntax && J2K.has(syntax)) return 'j2k';
  if (syntax === EXPLICIT_LE) {
    const photometric = a.text(TAG.photometric);
    if (
      a.number(TAG.samples) !== 3 ||
      photometric !== 'RGB' ||
      a.number(TAG.bitsAllocated) !== 8 ||
      (a.number(TAG.planar) ?? 0) !== 0
    ) {
      fail(
        'TILE_ERR_SLIDE_FORMAT',
        `${i.where}: uncompressed frames of ${a.number(TAG.samples)} samples, ${photometric}, ${a.number(TAG.bitsAllocated)} bits, planar configuration ${a.number(TAG.planar)}; expected 8-bit RGB, interleaved`,
      );
    }
    return 'raw';
  }
  const name = syntax ? `${syntax}${SYNTAX_NAMES[syntax] ? ` (${SYNTAX_NAMES[syntax]})` : ''}` : 'none given';
  return fail(
    'TILE_ERR_SLIDE_FORMAT',
    `${label}: ${i.where}: transfer syntax ${name} is not read; tile-infer reads ${JPEG_BASELINE} (JPEG Baseline), ${[...J2K].join(' and ')} (JPEG 2000) and ${EXPLICIT_LE} (Explicit VR Little Endian)`,
  );
}

/** Where each frame of an instance lies in its level's tile grid: from PlanePositionSlideSequence
 *  (1-based pixel positions of the frame's top-left corner), else in TILED_FULL order. */
function placeFrames(i: Instance, index: number, l: DicomLevel): void {
  const a = i.attrs;
  const frames = framesOf(i);
  const perFrame = a.items(TAG.perFrame);
  const tiles = l.tilesAcross * l.tilesDown;
  const offset = a.number(TAG.concatenationOffset) ?? 0;
  for (let f = 0; f < frames; f++) {
    const position = perFrame[f]?.items(TAG.planePosition)[0];
    let tile: number;
    if (position) {
      const column = position.number(TAG.columnPosition)! - 1;
      const row = position.number(TAG.rowPosition)! - 1;
      if (
        !(
          column % l.tileWidth === 0 &&
          row % l.tileHeight === 0 &&
          column >= 0 &&
          row >= 0 &&
          column < l.width &&
          row < l.height
        )
      ) {
        fail(
          'TILE_ERR_SLIDE_FORMAT',
          `${i.where}: frame ${f + 1} at column ${column + 1}, row ${row + 1} of the total pixel matrix, not on its ${l.tileWidth}x${l.tileHeight} tile grid`,
        );
      }
      tile = (row / l.tileHeight) * l.tilesAcross + column / l.tileWidth;
    } else {
      // TILED_FULL: rows of tiles, then focal planes and optical paths, of which the first is read.
      tile = offset + f;
      if (tile >= tiles) break;
    }
    // Several frames on one tile are other focal planes or optical paths: the first is read.
    if (l.instance[tile] >= 0) continue;
    l.instance[tile] = index;
    l.frame[tile] = f;
  }
}

/** Level 0's MPP from its PixelSpacing (mm, row then column spacing), checked against the
 *  imaged volume's size over the total pixel matrix. That check is by area: OrthancWSIDicomizer
 *  1.1 swaps ImagedVolumeWidth and Height for slides that are not square. */
function mppOf(base: Instance, label: string): Pick<Pyramid, 'mpp' | 'mppError' | 'mppErrorCode'> {
  const a = base.attrs;
  const measures =
    a.items(TAG.shared)[0]?.items(TAG.pixelMeasures)[0] ?? a.items(TAG.perFrame)[0]?.items(TAG.pixelMeasures)[0];
  const spacing = measures?.count(TAG.pixelSpacing) ? measures : a.count(TAG.pixelSpacing) ? a : null;
  if (!spacing) return { mpp: null, mppError: null, mppErrorCode: null };
  const [row, column] = [
    spacing.number(TAG.pixelSpacing, 0)!,
    spacing.number(TAG.pixelSpacing, 1) ?? spacing.number(TAG.pixelSpacing, 0)!,
  ];
  const stated = `PixelSpacing ${row}\\${column} mm (row\\column)`;
  const conflict = (why: string) => ({
    mpp: null,
    mppError: `${label}: ${why}; give the slide's MPP with --mpp`,
    mppErrorCode: 'TILE_ERR_SLIDE_MPP_CONFLICT' as const,
  });
  if (!(row > 0 && column > 0)) return conflict(`${stated} is not a pixel size`);
  if (Math.abs(row / column - 1) > 0.01)
    return conflict(
      `${stated}: pixels ${Number((row * 1000).toPrecision(4))} x ${Number((column * 1000).toPrecision(4))} µm are not square`,
    );
  // Six significant digits: converters write DS values from 32-bit floats (0.000500000024).
  const mpp = Number((((row + column) / 2) * 1000).toPrecision(6));
  const [w, h] = [a.number(TAG.imagedWidth), a.number(TAG.imagedHeight)];
  const [cols, rows] = [a.number(TAG.totalColumns)!, a.number(TAG.totalRows)!];
  if (w && h && w > 0 && h > 0) {
    const byVolume = Math.sqrt((w * h) / (cols * rows)) * 1000;
    if (Math.abs(mpp / byVolume - 1) > 0.02) {
      return conflict(
        `${stated} gives ${Number(mpp.toPrecision(4))} µm/px, but ImagedVolumeWidth x Height ${Number(w.toPrecision(6))} x ${Number(h.toPrecision(6))} mm over ${cols} x ${rows} pixels gives ${Number(byVolume.toPrecision(4))} µm/px`,
      );
    }
  }
  const checked = checkedMpp(mpp, stated, label);
  return { mpp: checked.mpp, mppError: checked.error, mppErrorCode: checked.error ? 'TILE_ERR_SLIDE_MPP_RANGE' : null };
}

/** A level's instances all there, by their own numbering: the parts of each concatenation (a
 *  level split across instances, PS3.3 C.7.6.16.2.2.4) numbered 1 to n without a gap, as many as
 *  InConcatenationTotalNumber where given, each part's frames following the one before's; and a
 *  TILED_FULL level (every tile has a frame) with no tile left over. A part gone (a partial copy)
 *  would otherwise be drawn as background; a tile no frame covers in a TILED_SPARSE level still
 *  is. The last part of a concatenation that gives no total cannot be missed this way. */
function whole(label: string, n: number, l: DicomLevel, instances: Instance[]): void {
  const level = `level ${n} (${l.width}x${l.height} pixels)`;
  const parts = new Map<string, Instance[]>();
  for (const k of l.members) {
    const uid = instances[k].attrs.text(TAG.concatenationUid);
    if (uid) parts.set(uid, [...(parts.get(uid) ?? []), instances[k]]);
  }
  for (const [uid, members] of parts) {
    const split = `${label}: ${level} is split across instances (ConcatenationUID ${uid})`;
    const numbered = members
      .map((i) => ({ i, part: i.attrs.number(TAG.concatenationPart) ?? 0 }))
      .sort((x, y) => x.part - y.part);
    let frames = 0;
    let expected = 1;
    for (const { i, part } of numbered) {
      if (expected > 1 && part === expected - 1) continue; // the same part twice (a copy): its frames placed once
      const offset = i.attrs.number(TAG.concatenationOffset) ?? 0;
      const at = `InConcatenationNumber (0020,9162) ${part}, ConcatenationFrameOffsetNumber (0020,9228) ${offset}, ${i.where}`;
      if (part !== expected)
        fail(
          'TILE_ERR_SLIDE_UNREADABLE',
          `${split}: part ${expected}${part > expected + 1 ? ` to ${part - 1}` : ''}${offset > frames ? ` (frames ${frames + 1} to ${offset})` : ''} is missing, the next there being ${at}: a partial copy? copy the series again`,
        );
      if (offset !== frames)
        fail('TILE_ERR_SLIDE_UNREADABLE', `${split}: ${at}, where the parts before it hold ${frames} frames`);
      frames = offset + framesOf(i);
      expected++;
    }
    const total = numbered[0].i.attrs.number(TAG.concatenationParts);
    if (total !== undefined && total !== expected - 1)
      fail(
        'TILE_ERR_SLIDE_UNREADABLE',
        `${split}: ${expected - 1} of its ${total} parts (InConcatenationTotalNumber (0020,9163)); part ${expected} is missing: a partial copy? copy the series again`,
      );
  }
  const full = l.members.some((k) => instances[k].attrs.text(TAG.dimensionOrganization)?.trim() === 'TILED_FULL');
  const empty = full ? l.instance.indexOf(-1) : -1;
  if (empty >= 0)
    fail(
      'TILE_ERR_SLIDE_UNREADABLE',
      `${label}: ${level} is TILED_FULL (DimensionOrganizationType (0020,9311)), every tile a frame, but its ${l.members.length} instance(s) hold no frame for tile ${empty % l.tilesAcross},${Math.floor(empty / l.tilesAcross)} (column, row): an instance is missing`,
    );
}

/** The pyramid of one series' WSI instances (wsiInstances). */
export function buildPyramid(label: string, instances: Instance[]): Pyramid {
  const associated: Pyramid['associated'] = [];
  const bySize = new Map<string, number[]>();
  instances.forEach((i, k) => {
    const type = flavour(i);
    if (type !== 'VOLUME') return void associated.push({ type, instance: k });
    const key = `${i.attrs.number(TAG.totalColumns)}x${i.attrs.number(TAG.totalRows)}`;
    bySize.set(key, [...(bySize.get(key) ?? []), k]);
  });
  if (!bySize.size)
    fail(
      'TILE_ERR_SLIDE_FORMAT',
      `${label}: no VOLUME image in the series (only ${associated.map((a) => a.type).join(', ')})`,
    );
  const levels: DicomLevel[] = [];
  for (const members of bySize.values()) {
    const first = instances[members[0]];
    const a = first.attrs;
    const [width, height] = [a.number(TAG.totalColumns)!, a.number(TAG.totalRows)!];
    const [tileWidth, tileHeight] = [a.number(TAG.columns)!, a.number(TAG.rows)!];
    if (!(width > 0 && height > 0 && tileWidth >= 16 && tileHeight >= 16 && tileWidth <= 4096 && tileHeight <= 4096)) {
      fail(
        'TILE_ERR_SLIDE_FORMAT',
        `${first.where}: a ${width}x${height} total pixel matrix in ${tileWidth}x${tileHeight} frames (expected frames of 16 to 4096 pixels a side)`,
      );
    }
    const tilesAcross = Math.ceil(width / tileWidth);
    const tilesDown = Math.ceil(height / tileHeight);
    // The grid is sized by these before any frame is read: a damaged size fails here, not in an allocation.
    if (width > MAX_SIDE || height > MAX_SIDE || tilesAcross * tilesDown > MAX_TILES)
      fail(
        'TILE_ERR_SLIDE_FORMAT',
        `${first.where}: TotalPixelMatrixColumns x Rows (0048,0006/0007) ${width}x${height} in ${tileWidth}x${tileHeight} frames is ${tilesAcross}x${tilesDown} tiles; expected at most ${MAX_SIDE} pixels a side (a glass slide at ${MPP_RANGE[0]} µm/px) and ${MAX_TILES} tiles`,
      );
    const level: DicomLevel = {
      width,
      height,
      downsample: 1,
      tileWidth,
      tileHeight,
      tilesAcross,
      tilesDown,
      coding: coding(first, label),
      members,
      instance: new Int32Array(tilesAcross * tilesDown).fill(-1),
      frame: new Int32Array(tilesAcross * tilesDown),
    };
    for (const k of members) {
      const i = instances[k];
      if (i.attrs.number(TAG.columns) !== tileWidth || i.attrs.number(TAG.rows) !== tileHeight)
        fail(
          'TILE_ERR_SLIDE_FORMAT',
          `${i.where}: ${i.attrs.number(TAG.columns)}x${i.attrs.number(TAG.rows)} frames where the level's other instances have ${tileWidth}x${tileHeight}`,
        );
      if (coding(i, label) !== level.coding)
        fail(
          'TILE_ERR_SLIDE_FORMAT',
          `${i.where}: transfer syntax ${i.transferSyntax}, where the level's other instances have ${first.transferSyntax}`,
        );
      placeFrames(i, k, level);
    }
    levels.push(level);
  }
  levels.sort((x, y) => y.width - x.width);
  levels.forEach((l, n) => whole(label, n, l, instances));
  const [base] = levels;
  for (const l of levels) l.downsample = (base.width / l.width + base.height / l.height) / 2;
  return { series: seriesOf(instances[0]), levels, associated, ...mppOf(instances[base.members[0]], label) };
}

/** Bytes of one frame's pixels, uncompressed (Rows x Columns x SamplesPerPixel x BitsAllocated;
 *  RGB of 8 bits where absent): what a compressed frame stays under (dicomweb.ts' framesLimit). */
export function frameBytes(i: Instance): number {
  const a = i.attrs;
  const [rows, columns] = [a.number(TAG.rows) ?? 0, a.number(TAG.columns) ?? 0];
  return rows * columns * (a.number(TAG.samples) ?? 3) * Math.ceil((a.number(TAG.bitsAllocated) ?? 8) / 8);
}

/** Frames an instance says it holds (NumberOfFrames, 1 when absent): a whole number from 1, and
 *  as many as its per-frame functional groups where it has them (PS3.3 C.7.6.16), so that a damaged
 *  count fails here, naming it, before anything is sized by it. */
export function framesOf(i: Instance): number {
  const frames = i.attrs.number(TAG.frames) ?? 1;
  const perFrame = i.attrs.items(TAG.perFrame).length;
  if (!(Number.isInteger(frames) && frames >= 1 && frames < 2 ** 31))
    fail(
      'TILE_ERR_SLIDE_UNREADABLE',
      `${i.where}: NumberOfFrames (0028,0008) is ${frames}, expected a whole number from 1`,
    );
  if (perFrame && perFrame !== frames)
    fail(
      'TILE_ERR_SLIDE_UNREADABLE',
      `${i.where}: NumberOfFrames (0028,0008) is ${frames}, but PerFrameFunctionalGroupsSequence (5200,9230) has ${perFrame} items, one a frame${frames > perFrame ? `: frame ${perFrame + 1} is missing` : ''}`,
    );
  return frames;
}
