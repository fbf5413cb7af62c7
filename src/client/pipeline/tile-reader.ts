// A slide's tiles as request bodies, in order, made on the reader pool ahead of the posting: tiles
// go in chunks of a grid row; for TIFF and SVS the bands of TIFF tiles the chunks need are decoded
// once each, as soon as a chunk needs them, and dropped after the last chunk that needs them.
import { bandView, planBands, TILES_PER_BAND, type BandView } from '../slide/bands.js';
import { tileRegion } from '../slide/region.js';
import { SlideError, type Region, type Slide } from '../slide/slide.js';
import type { ReaderPool } from './reader-pool.js';
import type { TileFields } from '../../contract/schemas.js';
import type { TileAt, TileWithBody } from './inference.js';

/** Tiles per pool task: enough to spread a task's fixed cost, few enough to keep threads even. */
const CHUNK = 4;

/** A read that failed on a reader thread (whose errors arrive as plain Errors): the slide, the
 *  level and what the thread said (the TIFF tile, the decoder's reason). A SlideError (the slide's
 *  own, from this thread: an SVS's missing tile drawn from the level above) says it already. */
const unreadable = (slide: Slide, level: number, err: Error) =>
  err instanceof SlideError
    ? err
    : new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${slide.path}: level ${level}: ${err.message}`);

/** A slide's tiles to read as request bodies. */
export interface SlideTiles<T extends TileAt> {
  pool: ReaderPool;
  /** The body every tile is made as. */
  type: 'application/json' | 'application/octet-stream';
  slide: Slide;
  tiles: readonly T[];
  /** Tile side in level-0 pixels. */
  extent: number;
  /** Tile side in pixels, as posted. */
  size: number;
  /** Each tile's request fields. */
  fields: (tile: T) => TileFields;
}

export async function* tileBodies<T extends TileAt>({
  pool,
  type,
  slide,
  tiles,
  extent,
  size,
  fields,
}: SlideTiles<T>): AsyncGenerator<TileWithBody<T>> {
  if (!tiles.length) return;
  const placed = tiles.map((tile) => ({
    tile,
    fields: fields(tile),
    ...tileRegion(slide, tile.x, tile.y, extent, size),
  }));
  const level = placed[0].level;
  const chunks: (typeof placed)[] = [];
  for (const p of placed) {
    const last = chunks[chunks.length - 1];
    if (last && last.length < CHUNK && last[0].region.y === p.region.y) last.push(p);
    else chunks.push([p]);
  }
  const source = slide.bandSource?.(level);
  const plan = source
    ? planBands(
        source,
        chunks.map((c) => c.map((p): Region => p.region)),
      )
    : null;
  if (plan) slide.prefetch?.(level, plan.bands);
  const users = new Int32Array(plan?.bands.length ?? 0);
  for (const uses of plan?.uses ?? []) for (const b of uses) users[b]++;
  const decoded = new Map<number, Promise<BandView>>();

  const band = (b: number): Promise<BandView> => {
    let view = decoded.get(b);
    if (!view) {
      const { ty, tx0, tx1 } = plan!.bands[b];
      view = (async () => {
        const job = await slide.bandJob!(level, ty, tx0, tx1);
        // Every band of the level takes a buffer of a whole band's size, so that buffers are
        // reused across bands, rows and slides with the same tiles.
        const data = pool.bandBuffer(TILES_PER_BAND * job.tileWidth * job.tileHeight * 3);
        await pool
          .decode({ job, into: data })
          .then(() => slide.redrawBand?.(level, job, data))
          .catch((err: Error) => {
            pool.releaseBand(data);
            throw unreadable(slide, level, err);
          });
        return bandView(job, data);
      })();
      decoded.set(b, view);
    }
    return view;
  };

  const start = async (k: number) => {
    const chunk = chunks[k];
    const bands = plan ? await Promise.all(plan.uses[k].map(band)) : undefined;
    const result = await pool
      .bodies({
        type,
        size,
        tiles: chunk.map((p) => ({ region: p.region, fields: p.fields })),
        bands,
        openslide: plan ? undefined : { path: slide.path, level },
      })
      .catch((err: Error) => {
        throw unreadable(slide, level, err);
      });
    for (const b of plan?.uses[k] ?? []) {
      if (--users[b] > 0) continue;
      pool.releaseBand((await decoded.get(b)!).data);
      decoded.delete(b);
    }
    return result;
  };

  // Two chunks per pool thread ahead of the posting, so the threads never wait for the poster.
  const ahead = 2 * pool.threads;
  const inFlight: ReturnType<typeof start>[] = [];
  let next = 0;
  const fill = () => {
    while (next < chunks.length && inFlight.length < ahead) {
      const job = start(next++);
      job.catch(() => {}); // awaited in order below; a later one may fail first
      inFlight.push(job);
    }
  };
  for (let k = 0; k < chunks.length; k++) {
    fill();
    const { buffers, lengths } = await inFlight.shift()!;
    fill();
    for (let i = 0; i < buffers.length; i++) {
      const bytes = Buffer.from(buffers[i], 0, lengths[i]);
      const { tile, fields: f } = chunks[k][i];
      yield { tile, body: { type, bytes, fields: f }, release: () => pool.releaseBody(bytes) };
    }
  }
}
