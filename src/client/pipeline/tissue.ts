// Tissue detection over the whole slide: an overview at 8 MPP cut into 512x512 tiles for the
// tissue-seg model, the masks stitched back into one slide-wide mask.
import sharp from 'sharp';
import type { TileClient } from '../tile-client.js';
import { bestLevel } from '../slide/region.js';
import type { BandDecoder, Slide } from '../slide/slide.js';

export const TISSUE_MPP = 8;
export const TISSUE_TILE = 512;

export interface Overview {
  width: number;
  height: number;
  /** RGB at TISSUE_MPP. */
  rgb: Buffer;
}

export interface TissueMask {
  width: number;
  height: number;
  /** 1 for tissue, at TISSUE_MPP, row-major. */
  mask: Uint8Array;
}

/** The whole slide at TISSUE_MPP, from the level nearest it; `decode`: where a level read from
 *  its tiles decodes them (the reader pool, so that a large or JPEG 2000 level does not hold the
 *  thread that sends the other slides' tiles). */
export async function readOverview(slide: Slide, mpp0: number, decode?: BandDecoder): Promise<Overview> {
  const l0 = slide.levels[0];
  const width = Math.max(1, Math.round((l0.width * mpp0) / TISSUE_MPP));
  const height = Math.max(1, Math.round((l0.height * mpp0) / TISSUE_MPP));
  return { width, height, rgb: await slide.overview(bestLevel(slide, TISSUE_MPP / mpp0), width, height, decode) };
}

/** A slide whose smallest level is far finer than TISSUE_MPP (an overview level missing: not
 *  written, or lost from a file cut short) gets its overview by a large reduction, and a tissue
 *  mask unlike the one its overview level would give: said in the summary. */
export function overviewWarning(slide: Slide, mpp0: number): string | null {
  const level = bestLevel(slide, TISSUE_MPP / mpp0);
  const mpp = slide.levels[level].downsample * mpp0;
  if (mpp * 3 >= TISSUE_MPP) return null;
  return `warning: no pyramid level near ${TISSUE_MPP} µm/px (the coarsest is level ${level}, ${Number(mpp.toPrecision(3))} µm/px): the tissue overview was reduced ${Math.round(TISSUE_MPP / mpp)}x from it; a missing overview level changes the tissue mask`;
}

/** A slide's overview and the tissue model to run over it. */
export interface TissueJob {
  overview: Overview;
  /** Level-0 MPP of the slide. */
  mpp0: number;
  client: TileClient;
  /** The tissue model's name. */
  model: string;
  /** The tiles' slide_name. */
  slideName: string;
}

/** Runs the tissue model over the overview, tile by tile (white glass past the edges). */
export async function detectTissue({ overview, mpp0, client, model, slideName }: TissueJob): Promise<TissueMask> {
  const { width, height } = overview;
  const mask = new Uint8Array(width * height);
  const across = Math.ceil(width / TISSUE_TILE);
  const down = Math.ceil(height / TISSUE_TILE);
  const scale = TISSUE_MPP / mpp0;
  const jobs: Promise<void>[] = [];
  for (let ty = 0; ty < down; ty++) {
    for (let tx = 0; tx < across; tx++) {
      const patchIdx = ty * across + tx;
      jobs.push(
        (async () => {
          const w = Math.min(TISSUE_TILE, width - tx * TISSUE_TILE);
          const h = Math.min(TISSUE_TILE, height - ty * TISSUE_TILE);
          // The overview's pixels, white glass past its edges; sent as raw pixels to a server
          // that takes them (inferTile).
          const tile = Buffer.alloc(TISSUE_TILE * TISSUE_TILE * 3, 255);
          for (let y = 0; y < h; y++) {
            const src = ((ty * TISSUE_TILE + y) * width + tx * TISSUE_TILE) * 3;
            overview.rgb.copy(tile, y * TISSUE_TILE * 3, src, src + w * 3);
          }
          const fields = {
            slide_name: slideName,
            x: Math.round(tx * TISSUE_TILE * scale),
            y: Math.round(ty * TISSUE_TILE * scale),
            width: TISSUE_TILE,
            height: TISSUE_TILE,
            patch_idx: patchIdx,
            resolution: TISSUE_MPP,
          };
          const res = await client.inferTile(`/api/predict/${encodeURIComponent(model)}`, { fields, rgb: tile });
          for (let y = 0; y < h; y++) {
            for (let x = 0; x < w; x++)
              mask[(ty * TISSUE_TILE + y) * width + tx * TISSUE_TILE + x] = res.output[y * TISSUE_TILE + x] ? 1 : 0;
          }
        })(),
      );
    }
  }
  await Promise.all(jobs);
  return { width, height, mask };
}

/** A mask written as a greyscale PNG (tissue 255) read back. */
export async function readTissueMask(path: string): Promise<TissueMask> {
  const { data, info } = await sharp(path).extractChannel(0).raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, mask: Uint8Array.from(data, (v) => (v > 127 ? 1 : 0)) };
}
