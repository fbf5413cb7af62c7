// A DICOM WSI series as a Slide, its frames from files or a DICOMweb server (a FrameSource). The
// reader pool decodes its levels in bands of frames, as it does TIFF tiles; regions and the
// overview are decoded here from the same bands.
import {
  SlideError,
  type BandDecoder,
  type BandJob,
  type BandSource,
  type FrameBytes,
  type Slide,
  type SlideLevel,
} from '../slide.js';
import { readTiled, tiledOverview } from '../tiled-read.js';
import type { Pyramid } from './pyramid.js';

/** A frame of the series: an instance (index into its instances) and a frame in it, from 0. */
export interface FrameAt {
  instance: number;
  frame: number;
}

/** The places in `at` of each instance's frames, by instance: a source fetches an instance's
 *  frames together. */
export function byInstance(at: FrameAt[]): Map<number, number[]> {
  const places = new Map<number, number[]>();
  at.forEach((a, k) => places.set(a.instance, [...(places.get(a.instance) ?? []), k]));
  return places;
}

/** Where the frames' bytes come from. */
export interface FrameSource {
  /** The frames' bytes, or where they lie in files, in order. */
  frames(at: FrameAt[]): Promise<FrameBytes[]>;
  /** The frames to be asked for, in order. */
  prefetch?(at: FrameAt[]): void;
  close(): Promise<void>;
}

export class DicomSlide implements Slide {
  readonly mpp: number | null;
  readonly mppError: string | null;
  readonly mppErrorCode: Pyramid['mppErrorCode'];

  constructor(
    readonly path: string,
    readonly reader: 'dicom' | 'dicomweb',
    private readonly pyramid: Pyramid,
    private readonly source: FrameSource,
  ) {
    ({ mpp: this.mpp, mppError: this.mppError, mppErrorCode: this.mppErrorCode } = pyramid);
  }

  get levels(): SlideLevel[] {
    return this.pyramid.levels.map(({ width, height, downsample }) => ({ width, height, downsample }));
  }

  bandSource(level: number): BandSource {
    const { width, height, tileWidth, tileHeight, tilesAcross, tilesDown } = this.pyramid.levels[level];
    return { width, height, tileWidth, tileHeight, tilesAcross, tilesDown };
  }

  /** The frames of tiles [tx0, tx1) of tile row `ty`; null where there is none. */
  private framesAt(level: number, ty: number, tx0: number, tx1: number): (FrameAt | null)[] {
    const l = this.pyramid.levels[level];
    const at: (FrameAt | null)[] = [];
    for (let tx = tx0; tx < tx1; tx++) {
      const i = ty * l.tilesAcross + tx;
      at.push(l.instance[i] < 0 ? null : { instance: l.instance[i], frame: l.frame[i] });
    }
    return at;
  }

  prefetch(level: number, bands: readonly { ty: number; tx0: number; tx1: number }[]): void {
    this.source.prefetch?.(bands.flatMap((b) => this.framesAt(level, b.ty, b.tx0, b.tx1).filter((a) => a !== null)));
  }

  async bandJob(level: number, ty: number, tx0: number, tx1: number): Promise<BandJob> {
    const l = this.pyramid.levels[level];
    const at = this.framesAt(level, ty, tx0, tx1);
    const fetched = await this.source.frames(at.filter((a) => a !== null));
    const tiles = at.map((a) => (a ? fetched.shift()! : null));
    const left = tx0 * l.tileWidth;
    const top = ty * l.tileHeight;
    return {
      path: this.path,
      page: level,
      subifd: -1,
      tileWidth: l.tileWidth,
      tileHeight: l.tileHeight,
      tiles: tx1 - tx0,
      left,
      top,
      width: Math.min(tx1 * l.tileWidth, l.width) - left,
      height: Math.min(l.tileHeight, l.height - top),
      frames: { coding: l.coding, tiles },
    };
  }

  readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array> {
    return this.coded(level, readTiled(this, level, { x, y, w, h }));
  }

  overview(level: number, width: number, height: number, decode?: BandDecoder): Promise<Buffer> {
    return this.coded(level, tiledOverview(this, this.path, level, width, height, decode));
  }

  /** A frame its decoder refuses (damaged bytes, a server's garbage) fails as a tile read does
   *  (tile-reader.ts): coded, naming the slide and the level; the decoder says only what it saw. */
  private async coded<T>(level: number, read: Promise<T>): Promise<T> {
    try {
      return await read;
    } catch (err) {
      if (err instanceof SlideError) throw err;
      throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: level ${level}: ${(err as Error).message}`);
    }
  }

  close(): Promise<void> {
    return this.source.close();
  }
}
