// A reader-pool thread (piscina): decodes bands of TIFF tiles into shared memory, and turns tiles'
// regions (cut from those bands, or read through OpenSlide) into request bodies. Everything here
// is the client's per-tile CPU: several threads do it while the main thread only posts.
import { move, transferableSymbol, valueSymbol } from 'piscina';
import { cutRows, type BandView } from '../slide/bands.js';
import { decodeBandJob } from '../slide/frames.js';
import type { BandJob } from '../slide/slide.js';
import { OpenSlideSlide } from '../slide/openslide-slide.js';
import { bufferRows, resampledRows, type RegionRows } from '../slide/region.js';
import type { Region } from '../slide/slide.js';
import type { TileFields } from '../../contract/schemas.js';
import { tileBody } from '../tile-body.js';

export interface DecodeTask {
  job: BandJob;
  into: SharedArrayBuffer;
}

export interface BodiesTask {
  /** Raw pixels for servers that take them, else the contract's JSON (tile-body.ts). */
  type: 'application/json' | 'application/octet-stream';
  /** Side of the tiles sent. */
  size: number;
  tiles: { region: Region; fields: TileFields }[];
  /** The decoded bands the regions lie in (TIFF, SVS)... */
  bands?: BandView[];
  /** ... or the slide to read them from through OpenSlide, at this level. */
  openslide?: { path: string; level: number };
  /** Body buffers the main thread is done with, to write into (moved here, not copied). */
  spare: ArrayBuffer[];
}

/** The bodies of a task, each at the start of an ArrayBuffer of its own (a spare one, or a new
 *  one: tile-body.ts) that moves to the main thread uncopied, and their lengths. */
export interface Bodies {
  buffers: ArrayBuffer[];
  lengths: number[];
}

export async function decode(task: DecodeTask): Promise<void> {
  await decodeBandJob(task.job, new Uint8Array(task.into));
}

const slides = new Map<string, OpenSlideSlide>();

function openSlideOf(path: string): OpenSlideSlide {
  let slide = slides.get(path);
  if (!slide) {
    slide = OpenSlideSlide.open(path);
    slides.set(path, slide);
    if (slides.size > 8) {
      const [oldest, old] = slides.entries().next().value!;
      slides.delete(oldest);
      void old.close();
    }
  }
  return slide;
}

export async function bodies(task: BodiesTask): Promise<unknown> {
  const out: Bodies = { buffers: [], lengths: [] };
  for (const { region: r, fields } of task.tiles) {
    let rows: RegionRows;
    if (task.openslide)
      rows = bufferRows(
        await openSlideOf(task.openslide.path).readRegion(task.openslide.level, r.x, r.y, r.w, r.h),
        r.w,
      );
    else {
      const bands = task.bands ?? [];
      rows = (y0, n, into, at) => cutRows(r, y0, n, bands, into, at);
    }
    const body = tileBody(task.type, task.size, await resampledRows(rows, r.w, task.size), fields, task.spare.pop());
    out.buffers.push(body.buffer as ArrayBuffer);
    out.lengths.push(body.length);
  }
  return move({ [transferableSymbol]: out.buffers, [valueSymbol]: out } as never);
}
