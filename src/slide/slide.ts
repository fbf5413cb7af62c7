// What the pipeline needs from a whole-slide image, whichever reader opened it.
export interface SlideLevel {
  width: number;
  height: number;
  /** Level-0 pixels per pixel of this level. */
  downsample: number;
}

export interface Slide {
  path: string;
  /** Which reader opened it: the built-in TIFF reader or libopenslide. */
  reader: 'tiff' | 'openslide';
  /** Largest first; levels[0] is full resolution. */
  levels: SlideLevel[];
  /** Level-0 microns per pixel from the slide's metadata; null when it records none. */
  mpp: number | null;
  /** RGB of the w x h block at (x, y) in `level`'s own pixels divided by `shrink` (a power of two
   *  up to maxShrink(level)); white past the slide's edges. */
  readRegion(level: number, x: number, y: number, w: number, h: number, shrink?: number): Promise<Uint8Array>;
  /** The largest `shrink` a level can be read at directly (JPEG decoders scale by 1/2, 1/4, 1/8
   *  in the DCT, far cheaper than decoding in full and resampling). */
  maxShrink(level: number): number;
  close(): Promise<void>;
}

export class SlideError extends Error {
  readonly code = 'SLIDE_UNREADABLE';
}
