// A region of a level decoded here from its tiles, band by band: the overview and regions of
// a remote slide, which libvips (a file reader) cannot open, of JPEG 2000 tiles, and of a level
// with tiles never written, which libvips refuses.
import sharp from 'sharp';
import { bandBytes, bandView, cutRows, planBands, type BandKey, type BandView } from './bands.js';
import { decodeBandJob } from './frames.js';
import { type BandDecoder, type Region, type Slide, SlideError } from './slide.js';

/** Decodes on this thread. */
const decodeHere: BandDecoder = (job, into) => decodeBandJob(job, new Uint8Array(into));

/** The largest level an overview is decoded from whole (OpenSlide's bound too). */
const MAX_TILED_OVERVIEW = 2 ** 28;

/** Tile rows decoded at once. */
const ROWS_IN_FLIGHT = 4;

type TiledSlide = Required<Pick<Slide, 'bandSource' | 'bandJob'>> & Pick<Slide, 'redrawBand'>;

export async function readTiled(
  slide: TiledSlide,
  level: number,
  r: Region,
  decode: BandDecoder = decodeHere,
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
        await decode(job, data);
        await slide.redrawBand?.(level, job, data);
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

/** A whole level read from its tiles, as width x height RGB (`name`: the slide, for the refusal
 *  of a level too large to hold). */
export async function tiledOverview(
  slide: TiledSlide,
  name: string,
  level: number,
  width: number,
  height: number,
  decode?: BandDecoder,
): Promise<Buffer> {
  const l = slide.bandSource(level);
  if (l.width * l.height > MAX_TILED_OVERVIEW)
    throw new SlideError(
      'TILE_ERR_SLIDE_TOO_LARGE',
      `${name}: the level nearest 8 µm/px is ${l.width}x${l.height} pixels, too large to decode whole (the slide has no smaller pyramid level)`,
    );
  const rgb = await readTiled(slide, level, { x: 0, y: 0, w: l.width, h: l.height }, decode);
  if (l.width === width && l.height === height) return Buffer.from(rgb.buffer, rgb.byteOffset, rgb.length);
  // Up to MAX_TILED_OVERVIEW, past sharp's default limit on an input's pixels (16383^2).
  return sharp(rgb, { raw: { width: l.width, height: l.height, channels: 3 }, limitInputPixels: false })
    .resize(width, height, { kernel: 'linear', fit: 'fill' })
    .raw()
    .toBuffer();
}
