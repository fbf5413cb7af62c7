// The install as npm 11 sees it, through the real npm: no project setting npm does not know (npm
// warns that such keys stop working in its next major), and every dependency's install script
// reviewed in package.json's allowScripts, onnxruntime-node's denied: its script downloads CUDA
// libraries from outside the npm registry, and the CPU binary ships in the package.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers/server.js';

/** npm in the repository as a user's shell runs it: without the npm_* variables that `npm test`
 *  passes down (they would turn project settings into environment ones). */
function npm(args: string[]) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'NODE_OPTIONS'),
  );
  const run = spawnSync('npm', args, { cwd: ROOT, encoding: 'utf8', env, timeout: 60000 });
  if (run.error) throw run.error;
  return run;
}

t.test('every install script of the dependencies is reviewed; no unknown project setting', async (t) => {
  const run = npm(['install-scripts', 'ls', '--json']);
  t.equal(run.status, 0, 'npm install-scripts ls runs');
  t.same(JSON.parse(run.stdout).allowScripts, [], 'npm install-scripts ls: nothing pending');
  t.notMatch(run.stderr, /Unknown project config/, 'no .npmrc key npm does not know');
  const { allowScripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  t.equal(allowScripts['onnxruntime-node'], false, "onnxruntime-node's download is never run");
});
