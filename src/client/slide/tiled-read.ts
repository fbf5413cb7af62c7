// A region of a level decoded here from its tiles, band by band: the overview and regions of
// a remote slide, which libvips (a file reader) cannot open, of JPEG 2000 tiles, and of a level
// with tiles never written, which libvips refuses.
import { bandBytes, bandView, cutRows, planBands, type BandView } from './bands.js';
import { decodeBandJob } from './frames.js';
import type { Region, Slide } from './slide.js';

export async function readTiled(
  slide: Required<Pick<Slide, 'bandSource' | 'bandJob'>>,
  level: number,
  r: Region,
): Promise<Uint8Array> {
  const { bands } = planBands(slide.bandSource(level), [[r]]);
  const views = await Promise.all(
    bands.map(async ({ ty, tx0, tx1 }): Promise<BandView> => {
      const job = await slide.bandJob(level, ty, tx0, tx1);
      const data = new SharedArrayBuffer(bandBytes(job));
      await decodeBandJob(job, new Uint8Array(data));
      return bandView(job, data);
    }),
  );
  const out = new Uint8Array(r.w * r.h * 3);
  cutRows(r, 0, r.h, views, out, 0);
  return out;
}
