// The layer rules (.dependency-cruiser.cjs) over the sources, as `npm run lint:layers` checks
// them, run here so that npm test checks them beside the other tests: a forbidden import, a
// cycle or an import of build-time code fails npm test, each violation named.
import t from 'tap';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { cruise, type ICruiseOptions, type IConfiguration } from 'dependency-cruiser';
import { ROOT } from './helpers/server.js';

t.test('no import breaks the layer rules', async (t) => {
  const ruleSet = createRequire(import.meta.url)(join(ROOT, '.dependency-cruiser.cjs')) as IConfiguration;
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
