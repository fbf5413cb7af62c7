// tile-infer's refusals that need no service: one line on stderr with the error's code, and the
// exit status (2: change the command line; 1: the input cannot be used).
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tileInfer } from './helpers/tile-infer.js';

const dir = mkdtempSync(join(tmpdir(), 'tile-infer-'));
const notASlide = join(dir, 'notes.txt');
writeFileSync(notASlide, 'not a slide');
// The port is never reached: each run stops before its first request.
const server = ['--server', 'http://127.0.0.1:9'];

t.test('each refusal is one line naming its code', async (t) => {
  const cases: [string, string[], number, RegExp][] = [
    ['unknown command', ['frobnicate'], 2, /^tile-infer: \[TILE_ERR_CLIENT_USAGE\] unknown command "frobnicate" \(slide or tiles\)\n$/],
    ['bad option value', ['slide', notASlide, '--model', 'm', '--out', dir, '--concurrency', '0'], 2, /^tile-infer: \[TILE_ERR_CLIENT_USAGE\] --concurrency 0: not a valid value\n$/],
    ['an empty tiles folder', ['tiles', dir + '/', '--model', 'm', '--out', join(dir, 'out'), ...server], 1, /^tile-infer: \[TILE_ERR_PLAN_NO_TILES\] \S+: no PNG tiles\n$/],
    ['a file no reader knows', ['slide', notASlide, '--model', 'm', '--out', join(dir, 'out'), ...server], 1, /^tile-infer: \[TILE_ERR_SLIDE_FORMAT\] \S+notes\.txt: /],
  ];
  const runs = await Promise.all(cases.map(([, args]) => tileInfer(args)));
  cases.forEach(([name, , code, line], i) => {
    t.equal(runs[i].code, code, `${name}: exit ${code}`);
    t.match(runs[i].stderr, line, name);
    t.equal(runs[i].stderr.split('\n').length, 2, `${name}: one line`);
  });
});
