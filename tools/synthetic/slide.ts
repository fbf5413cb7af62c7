// Synthetic whole-slide images with known tissue islands, written as a pyramidal tiled TIFF with
// JPEG tiles (MPP in the resolution tags) or as an Aperio-style SVS (MPP in the ImageDescription,
// shared JPEGTables, a stripped thumbnail after level 0). Tests and the benchmark use them.
import { Rng } from '../model-build/onnx-graph.js';
import { encodeJpeg, splitJpegTables, writeTiff, type TiffImage } from './tiff-writer.js';

/** An elliptical tissue island, in micrometres from the slide's top-left corner. */
export interface Island {
  cx: number;
  cy: number;
  rx: number;
  ry: number;
}

export interface SlideSpec {
  widthUm: number;
  heightUm: number;
  /** Level-0 microns per pixel. */
  mpp: number;
  islands: Island[];
  seed: number;
  format: 'tiff' | 'svs';
  /** Downsample of each pyramid level (first is 1). */
  downsamples?: number[];
  tileSize?: number;
  quality?: number;
  /** JPEG chroma subsampling (default 4:4:4; scanners often write 4:2:0). */
  chroma?: '4:4:4' | '4:2:0';
  /** TIFF: resolution tags to write instead of the MPP's (e.g. 72 per inch, as image editors
   *  write), level 0's; the other levels scale them. */
  resolution?: { perUnit: number; unit: 2 | 3 };
}

export interface Raster {
  width: number;
  height: number;
  /** RGB, row-major. */
  rgb: Uint8Array;
}

const inside = (islands: Island[], xUm: number, yUm: number) =>
  islands.some((i) => ((xUm - i.cx) / i.rx) ** 2 + ((yUm - i.cy) / i.ry) ** 2 <= 1);

/** 1 where the centre of a pixel at `mpp` lies in an island. */
export function truthMask(spec: SlideSpec, mpp: number): { width: number; height: number; mask: Uint8Array } {
  const width = Math.ceil(spec.widthUm / mpp);
  const height = Math.ceil(spec.heightUm / mpp);
  const mask = new Uint8Array(width * height);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      mask[y * width + x] = inside(spec.islands, (x + 0.5) * mpp, (y + 0.5) * mpp) ? 1 : 0;
  return { width, height, mask };
}

/** Level 0: glass with faint noise; islands of H&E-coloured tissue mixing dense purple and pink
 *  stroma in a smooth pattern, with pixel noise. */
export function renderLevel0(spec: SlideSpec): Raster {
  const width = Math.round(spec.widthUm / spec.mpp);
  const height = Math.round(spec.heightUm / spec.mpp);
  const { mask } = truthMask(spec, spec.mpp);
  const rng = new Rng(spec.seed);
  const phase = [rng.uniform() * 6, rng.uniform() * 6, rng.uniform() * 6];
  const rgb = new Uint8Array(width * height * 3);
  const dark = [118, 62, 158];
  const light = [222, 118, 172];
  for (let y = 0; y < height; y++) {
    const yu = y * spec.mpp;
    for (let x = 0; x < width; x++) {
      const i = y * width + x;
      const noise = (rng.uniform() - 0.5) * 8;
      let r = 243 + noise;
      let g = 241 + noise;
      let b = 243 + noise;
      if (mask[i]) {
        const xu = x * spec.mpp;
        const t =
          0.5 +
          0.25 * Math.sin(xu / 23 + phase[0] + Math.sin(yu / 41 + phase[1]) * 2) +
          0.25 * Math.sin(yu / 17 + phase[2]);
        r = light[0] + (dark[0] - light[0]) * t + noise * 2;
        g = light[1] + (dark[1] - light[1]) * t + noise * 2;
        b = light[2] + (dark[2] - light[2]) * t + noise * 2;
      }
      rgb[i * 3] = Math.min(255, Math.max(0, r));
      rgb[i * 3 + 1] = Math.min(255, Math.max(0, g));
      rgb[i * 3 + 2] = Math.min(255, Math.max(0, b));
    }
  }
  return { width, height, rgb };
}

/** Box-filter downsample by an integer factor (edge blocks average what they cover). */
export function downsample(src: Raster, factor: number): Raster {
  const width = Math.ceil(src.width / factor);
  const height = Math.ceil(src.height / factor);
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const sum = [0, 0, 0];
      let n = 0;
      for (let sy = y * factor; sy < Math.min(src.height, (y + 1) * factor); sy++) {
        for (let sx = x * factor; sx < Math.min(src.width, (x + 1) * factor); sx++) {
          const j = (sy * src.width + sx) * 3;
          sum[0] += src.rgb[j];
          sum[1] += src.rgb[j + 1];
          sum[2] += src.rgb[j + 2];
          n++;
        }
      }
      for (let c = 0; c < 3; c++) rgb[(y * width + x) * 3 + c] = Math.round(sum[c] / n);
    }
  }
  return { width, height, rgb };
}

/** A w x h block of the raster at (x0, y0), padded with white past the edges. */
function crop(src: Raster, x0: number, y0: number, w: number, h: number): Uint8Array {
  const out = new Uint8Array(w * h * 3).fill(255);
  for (let y = 0; y < h && y0 + y < src.height; y++) {
    const rowEnd = Math.min(w, src.width - x0);
    out.set(src.rgb.subarray(((y0 + y) * src.width + x0) * 3, ((y0 + y) * src.width + x0 + rowEnd) * 3), y * w * 3);
  }
  return out;
}

async function tiledLevel(
  raster: Raster,
  tileSize: number,
  quality: number,
  sharedTables: boolean,
  chroma: '4:4:4' | '4:2:0',
): Promise<TiffImage> {
  const blocks: Buffer[] = [];
  let jpegTables: Buffer | undefined;
  for (let ty = 0; ty < Math.ceil(raster.height / tileSize); ty++) {
    for (let tx = 0; tx < Math.ceil(raster.width / tileSize); tx++) {
      const full = await encodeJpeg(
        crop(raster, tx * tileSize, ty * tileSize, tileSize, tileSize),
        tileSize,
        tileSize,
        quality,
        chroma,
      );
      if (!sharedTables) blocks.push(full);
      else {
        const { tables, stream } = splitJpegTables(full);
        jpegTables = tables;
        blocks.push(stream);
      }
    }
  }
  return {
    width: raster.width,
    height: raster.height,
    blocks,
    tileSize,
    jpegTables,
    subsampling: chroma === '4:2:0' ? 2 : 1,
  };
}

/** Writes the slide and returns its level-0 raster (what the JPEG tiles were encoded from). */
export async function writeSlide(path: string, spec: SlideSpec): Promise<Raster> {
  const level0 = renderLevel0(spec);
  const tileSize = spec.tileSize ?? 256;
  const quality = spec.quality ?? 90;
  const downsamples = spec.downsamples ?? [1, 4, 16];
  const svs = spec.format === 'svs';
  const chroma = spec.chroma ?? '4:4:4';
  const levels = await Promise.all(
    downsamples.map((d) => tiledLevel(d === 1 ? level0 : downsample(level0, d), tileSize, quality, svs, chroma)),
  );
  if (!svs) {
    const base = spec.resolution ?? { perUnit: 10000 / spec.mpp, unit: 3 as const };
    levels.forEach((l, i) => (l.resolution = { perUnit: base.perUnit / downsamples[i], unit: base.unit }));
    writeTiff(path, levels);
    return level0;
  }
  const magnification = Math.round(10 / spec.mpp);
  levels[0].description =
    `Aperio Image Library v12.0.15 \r\n${level0.width}x${level0.height} [0,0 ${level0.width}x${level0.height}] (${tileSize}x${tileSize}) JPEG/RGB Q=${quality}` +
    `|AppMag = ${magnification}|StripeWidth = 2040|ScanScope ID = SYNTHETIC|Filename = ${spec.seed}|MPP = ${spec.mpp.toFixed(4)}`;
  // Aperio: level 0, then a stripped thumbnail (about 1024 px wide), then the other levels.
  const factor = Math.max(1, Math.ceil(level0.width / 1024));
  const thumb = downsample(level0, factor);
  const thumbnail: TiffImage = {
    width: thumb.width,
    height: thumb.height,
    blocks: [await encodeJpeg(thumb.rgb, thumb.width, thumb.height, quality, chroma)],
    subsampling: chroma === '4:2:0' ? 2 : 1,
    rowsPerStrip: thumb.height,
    subfileType: 0,
    description: `Aperio Image Library v12.0.15 \r\n${level0.width}x${level0.height} -> ${thumb.width}x${thumb.height} - `,
  };
  writeTiff(path, [levels[0], thumbnail, ...levels.slice(1)]);
  return level0;
}

/** A demonstration slide: three islands of different shapes on 2.4 x 1.6 mm of glass. */
export const DEMO_SLIDE: SlideSpec = {
  widthUm: 2400,
  heightUm: 1600,
  mpp: 0.5,
  seed: 7,
  format: 'tiff',
  islands: [
    { cx: 620, cy: 700, rx: 420, ry: 330 },
    { cx: 1500, cy: 520, rx: 260, ry: 200 },
    { cx: 1700, cy: 1150, rx: 480, ry: 250 },
  ],
};

const USAGE = `usage: node dist/tools/synthetic/slide.js OUT.tif|OUT.svs

Writes the demonstration slide (${DEMO_SLIDE.widthUm} x ${DEMO_SLIDE.heightUm} µm at ${DEMO_SLIDE.mpp} µm/px, three islands of tissue): a
pyramidal TIFF, or an Aperio SVS when OUT ends in .svs.`;

// `node dist/tools/synthetic/slide.js OUT.tif|OUT.svs` writes the demonstration slide.
if (import.meta.url === `file://${process.argv[1]}`) {
  const [out, ...rest] = process.argv.slice(2);
  if (out === '--help' || out === '-h') console.log(USAGE);
  else if (!out || rest.length || out.startsWith('-') || !/\.(tiff?|svs)$/i.test(out)) {
    console.error(USAGE);
    process.exit(2);
  } else await writeSlide(out, { ...DEMO_SLIDE, format: out.endsWith('.svs') ? 'svs' : 'tiff' });
}
