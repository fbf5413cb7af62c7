// Synthetic H&E and IHC tiles with known ground truth, built from scratch (value noise, stain
// colours, sensor noise). Used for the tissue-seg fixtures, the tests and the benchmark: no slide
// data can be downloaded here, and generated tiles come with an exact truth mask.
import { PNG } from 'pngjs';
import { Rng } from '../model-build/onnx-graph.js';

export interface SyntheticTile {
  width: number;
  height: number;
  /** RGBA, row-major. */
  rgba: Buffer;
  /** 1 where the tile shows tissue. */
  truth: Uint8Array;
}

type Rgb = [number, number, number];

/** Smooth noise in [0, 1]: bilinear interpolation of a random grid, summed over octaves. */
export function valueNoise(rng: Rng, width: number, height: number, cell: number, octaves = 3): Float32Array {
  const out = new Float32Array(width * height);
  let amplitude = 1;
  let total = 0;
  for (let o = 0; o < octaves; o++, cell /= 2, amplitude /= 2) {
    const c = Math.max(1, cell);
    const gw = Math.ceil(width / c) + 2;
    const gh = Math.ceil(height / c) + 2;
    const grid = Float32Array.from({ length: gw * gh }, () => rng.uniform());
    for (let y = 0; y < height; y++) {
      const gy = y / c;
      const y0 = Math.floor(gy);
      const fy = gy - y0;
      const sy = fy * fy * (3 - 2 * fy);
      for (let x = 0; x < width; x++) {
        const gx = x / c;
        const x0 = Math.floor(gx);
        const fx = gx - x0;
        const sx = fx * fx * (3 - 2 * fx);
        const a = grid[y0 * gw + x0] + (grid[y0 * gw + x0 + 1] - grid[y0 * gw + x0]) * sx;
        const b = grid[(y0 + 1) * gw + x0] + (grid[(y0 + 1) * gw + x0 + 1] - grid[(y0 + 1) * gw + x0]) * sx;
        out[y * width + x] += amplitude * (a + (b - a) * sy);
      }
    }
    total += amplitude;
  }
  for (let i = 0; i < out.length; i++) out[i] /= total;
  return out;
}

/** The value below which `fraction` of the samples lie. */
function quantile(values: Float32Array, fraction: number): number {
  const sorted = Float32Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.floor(fraction * sorted.length)))];
}

const mix = (a: Rgb, b: Rgb, t: number): Rgb => [
  a[0] + (b[0] - a[0]) * t,
  a[1] + (b[1] - a[1]) * t,
  a[2] + (b[2] - a[2]) * t,
];

const STAINS = {
  he: {
    dark: [118, 62, 158] as Rgb,
    light: [222, 118, 172] as Rgb,
    pale: [241, 224, 236] as Rgb,
    membrane: [226, 182, 212] as Rgb,
  },
  ihc: {
    dark: [150, 98, 62] as Rgb,
    light: [168, 170, 206] as Rgb,
    pale: [227, 227, 239] as Rgb,
    membrane: [205, 200, 225] as Rgb,
  },
};

export interface SlideTileOptions {
  size: number;
  seed: number;
  stain: 'he' | 'ihc';
  /** Fraction of the tile covered by tissue (0 for blank glass). */
  tissue: number;
  /** Fraction of the tissue that is pale stroma or fat rather than dense, stained tissue. */
  pale: number;
  /** Fraction of the pale tissue that is fat (white vacuoles in thin membranes). */
  fat: number;
  /** Dust specks and fibres on the glass. */
  dust: number;
}

/** A low-magnification (8 MPP) tile: tissue islands mixing dense and pale regions on glass. */
export function slideTile(o: SlideTileOptions): SyntheticTile {
  const { size } = o;
  const n = size * size;
  const rng = new Rng(o.seed);
  const islands = valueNoise(rng, size, size, size / 3, 4);
  const density = valueNoise(rng, size, size, size / 5, 3);
  const fatField = valueNoise(rng, size, size, size / 6, 2);
  const texture = valueNoise(rng, size, size, 6, 2);
  const glassShade = valueNoise(rng, size, size, size / 2, 2);
  const stain = STAINS[o.stain];

  const truth = new Uint8Array(n);
  const tissueLevel = o.tissue > 0 ? quantile(islands, 1 - o.tissue) : Infinity;
  for (let i = 0; i < n; i++) truth[i] = islands[i] > tissueLevel ? 1 : 0;
  const inside = Float32Array.from(
    Array.from(truth.keys())
      .filter((i) => truth[i])
      .map((i) => density[i]),
  );
  const paleLevel = inside.length ? quantile(inside, o.pale) : 0;
  const fatLevel = quantile(fatField, 1 - o.fat);

  // Fat: cells around random seeds (a Voronoi pattern, ~8 px across); membranes on cell borders.
  const cellSize = 8;
  const seedsPerRow = Math.ceil(size / cellSize);
  const seeds = Array.from({ length: seedsPerRow * seedsPerRow }, (_, k) => [
    ((k % seedsPerRow) + rng.uniform()) * cellSize,
    (Math.floor(k / seedsPerRow) + rng.uniform()) * cellSize,
  ]);
  const isMembrane = (x: number, y: number) => {
    const cx = Math.floor(x / cellSize);
    const cy = Math.floor(y / cellSize);
    let d1 = Infinity;
    let d2 = Infinity;
    for (let dy = -1; dy <= 1; dy++) {
      for (let dx = -1; dx <= 1; dx++) {
        const sx = cx + dx;
        const sy = cy + dy;
        if (sx < 0 || sy < 0 || sx >= seedsPerRow || sy >= seedsPerRow) continue;
        const [px, py] = seeds[sy * seedsPerRow + sx];
        const d = Math.hypot(px - x, py - y);
        if (d < d1) [d1, d2] = [d, d1];
        else if (d < d2) d2 = d;
      }
    }
    return d2 - d1 < 1.2;
  };

  const glassBase: Rgb = [242 + rng.uniform() * 4, 241 + rng.uniform() * 4, 243 + rng.uniform() * 4];
  const rgba = Buffer.alloc(n * 4);
  for (let i = 0; i < n; i++) {
    const x = i % size;
    const y = Math.floor(i / size);
    // Faint glass texture: a neutral shading of a few grey levels.
    const shade = (glassShade[i] - 0.5) * 8;
    let colour: Rgb = [glassBase[0] + shade, glassBase[1] + shade, glassBase[2] + shade];
    if (truth[i]) {
      if (density[i] > paleLevel) {
        const t = Math.min(1, Math.max(0, (density[i] - paleLevel) * 4 + (texture[i] - 0.5)));
        colour = mix(stain.light, stain.dark, t);
      } else if (fatField[i] > fatLevel) {
        colour = isMembrane(x, y) ? stain.membrane : colour;
      } else {
        colour = mix(stain.pale, stain.light, Math.max(0, texture[i] - 0.55) * 0.25);
      }
    }
    for (let c = 0; c < 3; c++)
      rgba[i * 4 + c] = Math.round(Math.min(255, Math.max(0, colour[c] + rng.normal() * 2.5)));
    rgba[i * 4 + 3] = 255;
  }

  // Dust: dark neutral specks (1-2 px radius) and short grey fibres, on glass and tissue alike.
  for (let d = 0; d < o.dust; d++) {
    const x0 = rng.uniform() * size;
    const y0 = rng.uniform() * size;
    const grey = 60 + rng.uniform() * 80;
    const fibre = rng.uniform() < 0.3;
    const angle = rng.uniform() * Math.PI;
    const length = fibre ? 8 + rng.uniform() * 12 : 0;
    const radius = fibre ? 0.6 : 1 + rng.uniform();
    for (let s = 0; s <= length; s++) {
      const cx = x0 + Math.cos(angle) * s;
      const cy = y0 + Math.sin(angle) * s;
      for (let y = Math.floor(cy - radius); y <= Math.ceil(cy + radius); y++) {
        for (let x = Math.floor(cx - radius); x <= Math.ceil(cx + radius); x++) {
          if (x < 0 || y < 0 || x >= size || y >= size || Math.hypot(x - cx, y - cy) > radius) continue;
          const i = y * size + x;
          for (let c = 0; c < 3; c++) rgba[i * 4 + c] = Math.round(grey + rng.normal() * 3);
        }
      }
    }
  }
  return { width: size, height: size, rgba, truth };
}

/** A high-magnification (0.5 MPP) H&E tile: eosin stroma with fibres, nuclei and lumens. */
export function cellularTile(seed: number, size = 224): SyntheticTile {
  const rng = new Rng(seed);
  const fibres = valueNoise(rng, size, size, 12, 3);
  const lumens = valueNoise(rng, size, size, size / 3, 2);
  const lumenLevel = quantile(lumens, 0.92);
  const n = size * size;
  const rgba = Buffer.alloc(n * 4);
  const stroma: Rgb = [228, 150, 196];
  const fibre: Rgb = [210, 108, 168];
  for (let i = 0; i < n; i++) {
    const colour: Rgb = lumens[i] > lumenLevel ? [240, 236, 240] : mix(stroma, fibre, Math.max(0, fibres[i] - 0.4) * 2);
    for (let c = 0; c < 3; c++) rgba[i * 4 + c] = Math.round(Math.min(255, Math.max(0, colour[c] + rng.normal() * 6)));
    rgba[i * 4 + 3] = 255;
  }
  const nuclei = 40 + Math.floor(rng.uniform() * 60);
  for (let k = 0; k < nuclei; k++) {
    const cx = rng.uniform() * size;
    const cy = rng.uniform() * size;
    const rx = 3 + rng.uniform() * 4;
    const ry = 3 + rng.uniform() * 3;
    const tone = 0.6 + rng.uniform() * 0.4;
    for (let y = Math.floor(cy - ry); y <= cy + ry; y++) {
      for (let x = Math.floor(cx - rx); x <= cx + rx; x++) {
        if (x < 0 || y < 0 || x >= size || y >= size || ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 > 1) continue;
        const i = y * size + x;
        const nucleus: Rgb = [70 + 60 * (1 - tone), 40 + 50 * (1 - tone), 130 + 40 * (1 - tone)];
        for (let c = 0; c < 3; c++)
          rgba[i * 4 + c] = Math.round(Math.min(255, Math.max(0, nucleus[c] + rng.normal() * 8)));
      }
    }
  }
  return { width: size, height: size, rgba, truth: new Uint8Array(n).fill(1) };
}

/** The benchmarks' tile i of a set: cellular texture (high resolution), or a slide's tissue and
 *  glass (low), its stain and tissue share varying with i. */
export function benchTile(seed: number, i: number, size: number, cellular: boolean): SyntheticTile {
  if (cellular) return cellularTile(seed + i, size);
  const tissue = 0.3 + (i % 5) * 0.1;
  return slideTile({ size, seed: seed + i, stain: i % 3 ? 'he' : 'ihc', tissue, pale: 0.4, fat: 0.2, dust: 20 });
}

/** A tile's pixels as uint8 RGB, row-major: the raw-body route's body. */
export function rgbOf({ rgba, width, height }: Pick<SyntheticTile, 'width' | 'height' | 'rgba'>): Buffer {
  const rgb = Buffer.allocUnsafe(width * height * 3);
  for (let p = 0; p < width * height; p++) rgba.copy(rgb, p * 3, p * 4, p * 4 + 3);
  return rgb;
}

/** RGB PNG bytes of a tile. */
export function encodePng(tile: Pick<SyntheticTile, 'width' | 'height' | 'rgba'>): Buffer {
  const png = new PNG({ width: tile.width, height: tile.height, colorType: 2, inputColorType: 6 });
  tile.rgba.copy(png.data);
  return PNG.sync.write(png, { colorType: 2, inputColorType: 6 });
}

/** A 0/1 mask as a greyscale PNG (0 and 255). */
export function encodeMaskPng(mask: Uint8Array, width: number, height: number): Buffer {
  const rgba = Buffer.alloc(width * height * 4);
  for (let i = 0; i < mask.length; i++) rgba.fill(mask[i] ? 255 : 0, i * 4, i * 4 + 3).writeUInt8(255, i * 4 + 3);
  return encodePng({ width, height, rgba });
}
