// The layer rules (.dependency-cruiser.cjs) over the sources, as `npm run lint:layers` checks
// them, run here so that npm test checks them beside the other tests: a forbidden import, a
// cycle or an import of build-time code fails npm test, each violation named.
import t from 'tap';
import { createRequire } from 'node:module';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cruise, type ICruiseOptions, type IConfiguration } from 'dependency-cruiser';
import { ROOT } from './helpers/server.js';

t.test('no import breaks the layer rules', async (t) => {
  const require = createRequire(import.meta.url);
  const ruleSet = require(join(ROOT, '.dependency-cruiser.cjs')) as IConfiguration;
  const cwd = process.cwd();
  process.chdir(ROOT);
  t.teardown(() => process.chdir(cwd));
  const { output } = await cruise(['src', 'supervisor', 'tools', 'bench', 'test'], {
    validate: true,
    ruleSet,
    ...(ruleSet.options as ICruiseOptions),
  });
  if (typeof output === 'string') throw new Error('dependency-cruiser answered text, expected its result');
  t.ok(output.summary.totalCruised > 200, `${output.summary.totalCruised} modules cruised`);
  t.same(
    output.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`),
    [],
    'no violations (npm run lint:layers explains each)',
  );
});

// dependency-cruiser sees what a function named `require` loads, so a rule (ONNX Runtime only
// through src/lib/onnxruntime.ts) holds for `const require = createRequire(...)`; a call of
// createRequire's result under another name, or inline, would load a module it never sees.
t.test('every createRequire loads through a `require` the rules can see', async (t) => {
  const seen =
    /^(const require = createRequire\(import\.meta\.url\);$|\/\/|\*)|createRequire\(import\.meta\.url\)\.resolve\(/;
  const unseen: string[] = [];
  for (const folder of ['src', 'supervisor', 'tools', 'bench', 'test'])
    for (const file of readdirSync(join(ROOT, folder), { recursive: true, encoding: 'utf8' })) {
      // This file names it in its own messages.
      if (!/\.[mc]?ts$/.test(file) || join(folder, file) === join('test', 'layers.test.ts')) continue;
      const lines = readFileSync(join(ROOT, folder, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        // Any other mention: an alias (`const make = createRequire`) would load unseen too.
        if (/createRequire/.test(line) && !/^import /.test(line) && !seen.test(line.trim()))
          unseen.push(`${folder}/${file}:${i + 1}: ${line.trim()}`);
      });
    }
  t.same(unseen, [], 'each createRequire is bound to `const require` or used to resolve a path');
});
