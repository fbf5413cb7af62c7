// What the pipeline needs from a whole-slide image, whichever reader opened it.
import { CodedError, type CodesOf } from '../../lib/errors.js';

export interface SlideLevel {
  width: number;
  height: number;
  /** Level-0 pixels per pixel of this level. */
  downsample: number;
}

/** A block of a level, in that level's pixels. */
export interface Region {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface Slide {
  path: string;
  /** Which reader opened it: the built-in TIFF reader, libopenslide, or the DICOM reader (files
   *  or DICOMweb). */
  reader: 'tiff' | 'openslide' | 'dicom' | 'dicomweb';
  /** Largest first; levels[0] is full resolution. */
  levels: SlideLevel[];
  /** Level-0 microns per pixel from the slide's metadata; null when it records none or records
   *  one no scanner produces (then mppError says which tag and what it read). */
  mpp: number | null;
  mppError: string | null;
  /** mppError's code, when it is not TILE_ERR_SLIDE_MPP_RANGE. */
  mppErrorCode?: CodesOf<'SLIDE'> | null;
  /** What the reader skipped but the slide is read without (a broken label image), each a line
   *  starting "warning: ", for the slide's summary row. */
  warnings?: readonly string[];
  /** RGB of the w x h block at (x, y) in `level`'s own pixels; white past the slide's edges. */
  readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array>;
  /** A whole level as width x height RGB (resized with a linear kernel when the sizes differ).
   *  `decode`: where its bands are decoded, when it is read from its tiles (tiled-read.ts). */
  overview(level: number, width: number, height: number, decode?: BandDecoder): Promise<Buffer>;
  /** TIFF, SVS and DICOM: the level's tile layout and how to decode a band of it, so that the
   *  reader pool decodes each tile once. Other readers read tiles' regions on the pool. */
  bandSource?(level: number): BandSource;
  bandJob?(level: number, ty: number, tx0: number, tx1: number): Promise<BandJob>;
  /** The bands bandJob will be asked for, in order: a remote slide fetches ahead in batches. */
  prefetch?(level: number, bands: readonly { ty: number; tx0: number; tx1: number }[]): void;
  /** Draws a decoded band's tiles that were never written, where the format draws them from other
   *  levels (an SVS's below level 0, tiff-slide.ts): called on each band once decoded into `data`. */
  redrawBand?(level: number, job: BandJob, data: SharedArrayBuffer): Promise<void>;
  close(): Promise<void>;
}

/** A slide that cannot be read or used: its format, a region, its MPP (the code says which). */
export class SlideError extends CodedError<CodesOf<'SLIDE'>> {
  override name = 'SlideError';
}

/** MPP that slide scanners produce (40x is ~0.25, 5x ~2; 0.05 to 20 leaves room both ways). A
 *  TIFF saying 72 dpi means 352.8 µm/px: a screen resolution, not the slide's. */
export const MPP_RANGE = [0.05, 20] as const;

export const mppInRange = (mpp: number) => Number.isFinite(mpp) && mpp >= MPP_RANGE[0] && mpp <= MPP_RANGE[1];

/** A slide's MPP as read from `source` (a tag), or the reason it is not believed. */
export function checkedMpp(
  mpp: number,
  source: string,
  path: string,
): { mpp: number; error: null } | { mpp: null; error: string } {
  if (mppInRange(mpp)) return { mpp, error: null };
  return {
    mpp: null,
    error: `${path}: ${source} gives ${Number(mpp.toPrecision(4))} µm/px, outside what slide scanners produce (${MPP_RANGE[0]} to ${MPP_RANGE[1]}); give the slide's MPP with --mpp`,
  };
}

/** The largest slide believed, in micrometres a side: a 75 x 50 mm glass slide with room to spare.
 *  Bigger means a wrong MPP or a damaged file, and the overview and tissue mask are sized from it. */
export const MAX_SLIDE_UM = 100_000;

/** A level's tile layout, for planning. */
export interface BandSource {
  width: number;
  height: number;
  tileWidth: number;
  tileHeight: number;
  tilesAcross: number;
  tilesDown: number;
}

/** What a thread needs to decode one band: the file and directory, and the band's extent in the
 *  level (clipped to it). JPEG bands carry their streams' byte ranges for libturbojpeg. */
export interface BandJob {
  path: string;
  page: number;
  /** The level's SubIFD in the page (OME-TIFF), or -1. */
  subifd: number;
  tileWidth: number;
  tileHeight: number;
  /** TIFF tiles in the band. */
  tiles: number;
  left: number;
  top: number;
  width: number;
  height: number;
  jpeg?: {
    /** The level's JPEGTables (SVS), spliced before each abbreviated stream. */
    tables: Uint8Array | null;
    /** offset, length of each tile's stream. */
    ranges: number[];
    /** What the TIFF's photometric interpretation says the streams hold. */
    colorspace: 'ycbcr' | 'rgb';
    /** A remote slide's streams, fetched (the ranges then only size them). */
    streams?: Uint8Array[];
  };
  /** Each tile's own encoded bytes (a DICOM frame, in a file or fetched already; a remote TIFF's
   *  tile), decoded one by one (frames.ts); null where the series has no frame (background). */
  frames?: { coding: FrameCoding; tiles: (FrameBytes | null)[]; tiff?: TiffCoding };
}

/** Decodes a band job into `into` (bandBytes(job) bytes): here, or on the reader pool. */
export type BandDecoder = (job: BandJob, into: SharedArrayBuffer) => Promise<void>;

/** How frames are coded: JPEG baseline; JPEG 2000 codestreams of R, G, B (or of a colour transform
 *  the codestream undoes) or of Y, Cb, Cr (Aperio's 33003); RGB pixels; a TIFF's other tiles. */
export type FrameCoding = 'jpeg' | 'j2k' | 'j2k-ycbcr' | 'raw' | 'tiff';

/** How a TIFF's non-JPEG tiles are coded: the Compression tag (none, LZW, deflate, PackBits),
 *  the Predictor, and the samples per pixel (RGB, or RGB and extra samples), 8 bits each, chunky. */
export interface TiffCoding {
  compression: number;
  predictor: number;
  samples: number;
}

export type FrameBytes = { path: string; offset: number; length: number } | { bytes: Uint8Array };
