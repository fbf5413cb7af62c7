// A region of a level decoded here from its tiles, band by band: the overview and regions of
// a remote slide, which libvips (a file reader) cannot open, of JPEG 2000 tiles, and of a level
// with tiles never written, which libvips refuses.
import { bandBytes, bandView, cutRows, planBands, type BandKey, type BandView } from './bands.js';
import { decodeBandJob } from './frames.js';
import type { Region, Slide } from './slide.js';

/** Tile rows decoded at once. */
const ROWS_IN_FLIGHT = 4;

export async function readTiled(
  slide: Required<Pick<Slide, 'bandSource' | 'bandJob'>>,
  level: number,
  r: Region,
): Promise<Uint8Array> {
  const source = slide.bandSource(level);
  const { bands } = planBands(source, [[r]]);
  const rows = new Map<number, BandKey[]>();
  for (const band of bands) rows.set(band.ty, [...(rows.get(band.ty) ?? []), band]);
  // White where no band is (past the level's edges).
  const out = new Uint8Array(r.w * r.h * 3).fill(255);
  // A few tile rows at a time (a remote slide's fetches overlap), each cut into place and dropped:
  // a whole level's bands at once held twice its pixels.
  const pending = [...rows];
  const readRow = async ([ty, row]: [number, BandKey[]]) => {
    const views = await Promise.all(
      row.map(async ({ tx0, tx1 }): Promise<BandView> => {
        const job = await slide.bandJob(level, ty, tx0, tx1);
        const data = new SharedArrayBuffer(bandBytes(job));
        await decodeBandJob(job, new Uint8Array(data));
        return bandView(job, data);
      }),
    );
    const top = Math.max(r.y, ty * source.tileHeight);
    const bottom = Math.min(r.y + r.h, (ty + 1) * source.tileHeight);
    cutRows(r, top - r.y, bottom - top, views, out, (top - r.y) * r.w * 3);
  };
  const worker = async () => {
    for (let next = pending.shift(); next; next = pending.shift()) await readRow(next);
  };
  await Promise.all(Array.from({ length: ROWS_IN_FLIGHT }, worker));
  return out;
}
