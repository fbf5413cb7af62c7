// `npm run examples:build`: the example requests the README's quick start sends, one per shipped
// model, each a synthetic H&E tile of that model's size and MPP (deterministic, so the committed
// files can be checked against a rebuild).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cellularTile, encodePng, slideTile } from './synthetic/tissue.js';

export function exampleRequests(): Record<string, object> {
  const tile = (png: Buffer, size: number, mpp: number) => ({
    image_data: png.toString('base64'),
    slide_name: 'example-slide',
    x: 0,
    y: 0,
    width: size,
    height: size,
    patch_idx: 0,
    resolution: mpp,
  });
  const small = tile(encodePng(cellularTile(7)), 224, 0.5);
  return {
    'tissue-seg': tile(
      encodePng(slideTile({ size: 512, seed: 7, stain: 'he', tissue: 0.5, pale: 0.3, fat: 0.2, dust: 10 })),
      512,
      8.0,
    ),
    'gene-expr': small,
    'tile-embed': small,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = process.argv[2] ?? 'examples';
  mkdirSync(dir, { recursive: true });
  for (const [model, body] of Object.entries(exampleRequests()))
    writeFileSync(join(dir, `${model}.json`), JSON.stringify(body) + '\n');
}
