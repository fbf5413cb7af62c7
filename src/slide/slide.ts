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
  /** RGB of the w x h block at (x, y) in `level`'s own pixels; white past the slide's edges. */
  readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array>;
  close(): Promise<void>;
}

export class SlideError extends Error {
  readonly code = 'SLIDE_UNREADABLE';
}
