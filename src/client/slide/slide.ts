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
  /** Which reader opened it: the built-in TIFF reader or libopenslide. */
  reader: 'tiff' | 'openslide';
  /** Largest first; levels[0] is full resolution. */
  levels: SlideLevel[];
  /** Level-0 microns per pixel from the slide's metadata; null when it records none. */
  mpp: number | null;
  /** RGB of the w x h block at (x, y) in `level`'s own pixels; white past the slide's edges.
   *  `into`, w * h * 3 bytes, may be written and returned instead of a new buffer. */
  readRegion(level: number, x: number, y: number, w: number, h: number, into?: Uint8Array): Promise<Uint8Array>;
  /** Optional hint: the regions of a level about to be read. The TIFF reader then decodes the
   *  TIFF tiles they need in runs, and none beside them. */
  expect?(level: number, regions: readonly Region[]): void;
  close(): Promise<void>;
}

/** A slide that cannot be read: its format, a region, or its MPP (the code says which). */
export class SlideError extends CodedError<CodesOf<'SLIDE'>> {
  override name = 'SlideError';
}
