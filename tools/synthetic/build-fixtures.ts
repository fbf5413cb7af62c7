// Writes the tissue-seg fixtures (test/fixtures/tissue): 512x512 tiles at 8 MPP with truth masks.
// `node dist/tools/synthetic/build-fixtures.js [dir]`; deterministic, so the committed files can be
// regenerated and compared.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { encodeMaskPng, encodePng, slideTile, type SlideTileOptions } from './tissue.js';

export const TISSUE_FIXTURES: (SlideTileOptions & { name: string; note: string })[] = [
  {
    name: 'he-pale-stroma',
    note: 'H&E islands, 55% of the tissue pale stroma or fat',
    size: 512,
    seed: 1,
    stain: 'he',
    tissue: 0.45,
    pale: 0.55,
    fat: 0.2,
    dust: 40,
  },
  {
    name: 'he-mixed',
    note: 'H&E islands, dense tissue with loose connective tissue',
    size: 512,
    seed: 2,
    stain: 'he',
    tissue: 0.35,
    pale: 0.4,
    fat: 0.3,
    dust: 25,
  },
  {
    name: 'he-fat',
    note: 'H&E with large fat lobules (membranes around empty vacuoles)',
    size: 512,
    seed: 3,
    stain: 'he',
    tissue: 0.5,
    pale: 0.6,
    fat: 0.6,
    dust: 30,
  },
  {
    name: 'ihc-pale',
    note: 'IHC: DAB-positive regions, light haematoxylin counterstain, pale stroma',
    size: 512,
    seed: 4,
    stain: 'ihc',
    tissue: 0.4,
    pale: 0.5,
    fat: 0.15,
    dust: 30,
  },
  {
    name: 'glass-dust',
    note: 'blank glass with faint texture, dust specks and fibres: no tissue',
    size: 512,
    seed: 5,
    stain: 'he',
    tissue: 0,
    pale: 0,
    fat: 0,
    dust: 60,
  },
];

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = process.argv[2] ?? 'test/fixtures/tissue';
  mkdirSync(dir, { recursive: true });
  for (const fixture of TISSUE_FIXTURES) {
    const tile = slideTile(fixture);
    writeFileSync(join(dir, `${fixture.name}.png`), encodePng(tile));
    writeFileSync(join(dir, `${fixture.name}.truth.png`), encodeMaskPng(tile.truth, tile.width, tile.height));
  }
  writeFileSync(join(dir, 'fixtures.json'), JSON.stringify(TISSUE_FIXTURES, null, 2) + '\n');
  console.log(`wrote ${TISSUE_FIXTURES.length} fixtures to ${dir}`);
}
