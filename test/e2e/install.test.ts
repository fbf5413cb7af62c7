// tile-infer as the README installs and runs it: the install line of "Process a slide" (into a
// temporary prefix), then the command from a folder outside the clone, on a slide there, against
// the real service. No example calls it through npx, which outside the clone would look the name
// up on the public registry.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { ROOT, startServer } from '../helpers/server.js';
import { tempDir } from '../../tools/temp-dir.js';

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const section = readme.slice(
  readme.indexOf('## Process a slide'),
  readme.indexOf('\n## ', readme.indexOf('## Process a slide') + 1),
);
const lines = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) => m[1].split('\n')).filter(Boolean);

/** A shell command as a user's shell runs it: without what npm and tap pass down. */
function sh(command: string, cwd: string, path = process.env.PATH!) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'NODE_OPTIONS' && !k.startsWith('TAP')),
  );
  return spawnSync('/bin/sh', ['-c', command], { cwd, encoding: 'utf8', env: { ...env, PATH: path }, timeout: 120000 });
}

t.test('the examples call tile-infer itself, after an install step', async (t) => {
  t.same(
    lines.filter((l) => /\bnpx\b.*\btile-infer\b/.test(l)),
    [],
    'no example through npx',
  );
  t.ok(
    lines.some((l) => /^tile-infer slide /.test(l)),
    'examples run tile-infer itself',
  );
  t.ok(
    lines.some((l) => /^npm install -g /.test(l)),
    'an install line',
  );
});

t.test('installed as the README says, tile-infer runs from any folder', async (t) => {
  const install = lines.find((l) => /^npm install -g /.test(l));
  if (!install) return t.fail('no install line in "Process a slide"');
  const prefix = tempDir('prefix');
  const installed = sh(`${install.replace(/#.*/, '')} --prefix ${prefix}`, ROOT);
  t.equal(installed.status, 0, install, { stderr: installed.stderr });
  t.ok(
    existsSync(join(prefix, 'lib/node_modules/tile-inference-service/dist/src/client/tile-infer.js')),
    'dist/ is in what was installed',
  );
  const path = `${join(prefix, 'bin')}:${process.env.PATH}`;
  const elsewhere = tempDir('slides');
  const help = sh('tile-infer --help', elsewhere, path);
  t.equal(help.status, 0, 'tile-infer --help', { stderr: help.stderr });
  t.match(help.stdout, /^Usage:\n {2}tile-infer slide SLIDE/);

  const server = await startServer({ models: [{ name: 'tissue-seg' }, { name: 'tile-embed', instances: 1 }] });
  t.teardown(() => server.stop());
  await writeSlide(join(elsewhere, 'demo.tif'), {
    widthUm: 800,
    heightUm: 600,
    mpp: 0.5,
    seed: 3,
    format: 'tiff',
    islands: [{ cx: 400, cy: 300, rx: 250, ry: 200 }],
  });
  const run = sh(`tile-infer slide demo.tif --model tile-embed --out results --server ${server.url}`, elsewhere, path);
  t.equal(run.status, 0, 'tile-infer slide demo.tif', { stderr: run.stderr });
  t.ok(existsSync(join(elsewhere, 'results/features_tile-embed/demo.h5')), 'features written where the command ran');
});
