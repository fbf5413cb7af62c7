// /docs examples: every front builds them at start, so no tile size may take a front down.
import t from 'tap';
import { PNG } from 'pngjs';
import { describeBodies, EXAMPLE_MAX_PIXELS, exampleRequest, requestDocs } from '../../src/front/route-docs.js';
import { readManifest } from '../../src/model-package/model-package.js';
import type { Manifest } from '../../src/model-package/manifest.js';
import { MAX_TILE_SIDE } from '../../src/lib/tile-bound.js';
import { MODELS } from '../helpers/server.js';

const tissueSeg = readManifest(`${MODELS}/tissue-seg`);
const sized = (width: number, height: number): Manifest => ({
  ...tissueSeg,
  tile: { ...tissueSeg.tile, width, height },
});

t.test("a tile of the model's size up to the cap; a placeholder beyond, built in no time", async (t) => {
  const png = PNG.sync.read(Buffer.from(exampleRequest(sized(512, 256))!.image_data, 'base64'));
  t.same([png.width, png.height], [512, 256], 'a real tile of the model size');
  // 1e308 passed the schema as an integer before the bound; 100000 px a side was a RangeError at
  // every front's start (a 40 GB pngjs buffer), in a restart loop.
  for (const side of [1e308, 100000, MAX_TILE_SIDE]) {
    const manifest = sized(side, side);
    const started = performance.now();
    const example = exampleRequest(manifest)!;
    t.match(example.image_data, /too large for an example/, `${side} px: placeholder`);
    t.ok(describeBodies('/api/predict/x', manifest), `${side} px: bodies described`);
    t.ok(requestDocs(manifest, null), `${side} px: request docs`);
    t.ok(performance.now() - started < 1000, `${side} px: no full-size image built`);
  }
  t.ok(EXAMPLE_MAX_PIXELS < MAX_TILE_SIDE * MAX_TILE_SIDE);
});
