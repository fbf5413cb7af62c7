// The tissue detector against the committed fixtures' truth masks, run through the same
// preprocessing and model package the worker uses. Saturation + Otsu, the common detector, is
// measured beside it on the same tiles to show what the pale-stroma fixtures demand.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import ort from '../src/lib/onnxruntime.js';
import { readPackage } from '../src/model-package/model-package.js';
import { makePreprocessor } from '../src/worker/preprocess.js';
import { TISSUE_FIXTURES } from '../tools/synthetic/build-fixtures.js';
import { slideTile, encodePng, encodeMaskPng } from '../tools/synthetic/tissue.js';
import { FIXTURES } from './helpers/tiles.js';
import { MODELS } from './helpers/server.js';

const iou = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let inter = 0;
  let union = 0;
  for (let i = 0; i < a.length; i++) {
    inter += a[i] && b[i] ? 1 : 0;
    union += a[i] || b[i] ? 1 : 0;
  }
  return union === 0 ? 1 : inter / union;
};

/** Saturation (max-min)/max per pixel, thresholded by Otsu's method. */
function saturationOtsu(rgba: Buffer): Uint8Array {
  const n = rgba.length / 4;
  const sat = new Uint8Array(n);
  const hist = new Array(256).fill(0);
  for (let i = 0; i < n; i++) {
    const r = rgba[4 * i];
    const g = rgba[4 * i + 1];
    const b = rgba[4 * i + 2];
    const max = Math.max(r, g, b);
    sat[i] = max ? Math.round(((max - Math.min(r, g, b)) / max) * 255) : 0;
    hist[sat[i]]++;
  }
  let sum = 0;
  hist.forEach((h, v) => (sum += v * h));
  let best = -1;
  let threshold = 0;
  let wB = 0;
  let sB = 0;
  for (let v = 0; v < 256; v++) {
    wB += hist[v];
    if (!wB || wB === n) continue;
    sB += v * hist[v];
    const between = wB * (n - wB) * (sB / wB - (sum - sB) / (n - wB)) ** 2;
    if (between > best) [best, threshold] = [between, v];
  }
  return sat.map((s) => (s > threshold ? 1 : 0));
}

const pkg = readPackage(join(MODELS, 'tissue-seg'));
const preprocess = makePreprocessor(pkg.manifest);
const session = await ort.InferenceSession.create(pkg.modelPath);

async function detect(rgba: Buffer): Promise<Uint8Array> {
  const out = await session.run({
    [pkg.manifest.tensors.image]: preprocess.tensor([{ width: 512, height: 512, channels: 4, data: rgba }]),
  });
  return out.mask.data as Uint8Array;
}

t.test('fixtures are what the generator makes', async (t) => {
  for (const fixture of TISSUE_FIXTURES) {
    const tile = slideTile(fixture);
    t.ok(encodePng(tile).equals(readFileSync(join(FIXTURES, 'tissue', `${fixture.name}.png`))), `${fixture.name}.png`);
    t.ok(
      encodeMaskPng(tile.truth, 512, 512).equals(readFileSync(join(FIXTURES, 'tissue', `${fixture.name}.truth.png`))),
      `${fixture.name}.truth.png`,
    );
  }
});

for (const fixture of TISSUE_FIXTURES) {
  t.test(`${fixture.name}: ${fixture.note}`, async (t) => {
    const rgba = PNG.sync.read(readFileSync(join(FIXTURES, 'tissue', `${fixture.name}.png`))).data;
    const truthPng = PNG.sync.read(readFileSync(join(FIXTURES, 'tissue', `${fixture.name}.truth.png`))).data;
    const truth = Uint8Array.from({ length: 512 * 512 }, (_, i) => (truthPng[i * 4] > 127 ? 1 : 0));
    const mask = await detect(rgba);
    const fraction = mask.reduce((s, v) => s + v, 0) / mask.length;
    if (fixture.tissue === 0) {
      t.ok(fraction <= 0.01, `blank glass with dust: ${(fraction * 100).toFixed(2)}% tissue <= 1%`);
      return;
    }
    const ours = iou(mask, truth);
    const otsu = iou(saturationOtsu(rgba), truth);
    t.ok(ours >= 0.85, `IoU ${ours.toFixed(3)} >= 0.85 (saturation+Otsu: ${otsu.toFixed(3)})`);
    t.ok(otsu < 0.75, `the fixture defeats saturation+Otsu (IoU ${otsu.toFixed(3)})`);
  });
}
