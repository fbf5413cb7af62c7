// tile-infer's refusals that need no service: one line on stderr with the error's code and exit
// status 2 (change the command line). Refusals that need one (an unreachable server, a slide that
// cannot be read) are in test/e2e/client-defects.test.ts and cohort.test.ts.
import t from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tileInfer } from './helpers/tile-infer.js';
import { tempDir } from '../tools/temp-dir.js';

const dir = tempDir('tile-infer');
const notASlide = join(dir, 'notes.txt');
writeFileSync(notASlide, 'not a slide');
const manifest = join(dir, 'cohort.csv');
writeFileSync(manifest, 'slide,mpp\nnotes.txt,0.5\n');
for (const sub of ['a', 'b']) {
  mkdirSync(join(dir, sub));
  writeFileSync(join(dir, sub, 'demo.tif'), 'not read: refused before');
}

t.test('each refusal is one line naming its code', async (t) => {
  const cases: [string, string[], number, RegExp][] = [
    [
      'unknown command',
      ['frobnicate'],
      2,
      /^tile-infer: \[TILE_ERR_CLIENT_USAGE\] unknown command "frobnicate" \(slide or tiles\)\n$/,
    ],
    [
      'bad option value',
      ['slide', notASlide, '--model', 'm', '--out', dir, '--concurrency', '0'],
      2,
      /^tile-infer: \[TILE_ERR_CLIENT_USAGE\] --concurrency 0: expected an integer from 1\n$/,
    ],
    [
      'threads past a few per core',
      ['slide', notASlide, '--model', 'm', '--out', dir, '--threads', '100000'],
      2,
      /^tile-infer: \[TILE_ERR_CLIENT_USAGE\] --threads 100000: expected an integer from 1 to \d+\n$/,
    ],
    [
      'a manifest without a wsi column',
      ['slide', manifest, '--model', 'm', '--out', dir],
      2,
      /^tile-infer: \[TILE_ERR_COHORT_MANIFEST\] \S+cohort\.csv: no "wsi" column/,
    ],
    [
      'a shard out of range',
      ['slide', notASlide, '--model', 'm', '--out', dir, '--shard', '3/3'],
      2,
      /^tile-infer: \[TILE_ERR_COHORT_SHARD\] --shard 3\/3: shard 3 of 3/,
    ],
    [
      'two slides with one name',
      ['slide', join(dir, 'a/demo.tif'), join(dir, 'b/demo.tif'), '--model', 'm', '--out', dir],
      2,
      /^tile-infer: \[TILE_ERR_COHORT_NAME_CLASH\] slides with the same file name/,
    ],
  ];
  const runs = await Promise.all(cases.map(([, args]) => tileInfer(args)));
  cases.forEach(([name, , code, line], i) => {
    t.equal(runs[i].code, code, `${name}: exit ${code}`);
    t.match(runs[i].stderr, line, name);
    t.equal(runs[i].stderr.split('\n').length, 2, `${name}: one line`);
  });
});
