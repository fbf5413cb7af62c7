// ONNX Runtime's telemetry stays off. onnxruntime-node 1.30 on Linux keeps a device id and a queue
// of events for Microsoft's collector under $XDG_CACHE_HOME (and an empty mat-debug-<pid>.log in
// $TMPDIR) unless ORT_DISABLE_TELEMETRY is set, or a CI variable such as CI is. First the runtime
// loaded as any program would, the CI variables blanked, to show where those files land (the
// collector made unreachable: a dead proxy, no CA certificates); then the real service, its
// supervisor and a worker serving a tile, in the same environment: none of them may appear.
import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT, startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { tempDir } from '../../tools/temp-dir.js';

/** The variables by which ONNX Runtime tells a CI host (where it sends nothing), and its opt-outs:
 *  blank, so that each run here behaves as on a user's host whatever CI runs it. */
const BLANK = Object.fromEntries(
  [
    'CI',
    'TF_BUILD',
    'GITHUB_ACTIONS',
    'GITLAB_CI',
    'CIRCLECI',
    'TRAVIS',
    'JENKINS_URL',
    'CODEBUILD_BUILD_ID',
    'BUILDKITE',
    'TEAMCITY_VERSION',
    'APPVEYOR',
    'BITBUCKET_BUILD_NUMBER',
    'ORT_RUNNING_UNIT_TESTS',
    'ORT_DISABLE_TELEMETRY',
    'ORT_TELEMETRY_DISABLED',
  ].map((name) => [name, '']),
);
const OFFLINE = {
  NO_PROXY: '',
  no_proxy: '',
  HTTPS_PROXY: 'http://127.0.0.1:9',
  https_proxy: 'http://127.0.0.1:9',
  HTTP_PROXY: 'http://127.0.0.1:9',
  http_proxy: 'http://127.0.0.1:9',
  SSL_CERT_FILE: '/dev/null',
};

/** A home, cache and temporary folder of their own. */
function folders() {
  const root = tempDir('ort-telemetry');
  const [cache, home, tmp] = ['cache', 'home', 'tmp'].map((name) => join(root, name));
  for (const dir of [cache, home, tmp]) mkdirSync(dir);
  return {
    env: { ...BLANK, ...OFFLINE, XDG_CACHE_HOME: cache, HOME: home, TMPDIR: tmp },
    deviceId: join(cache, 'Microsoft/DeveloperTools/.onnxruntime/deviceid'),
    cacheAtHome: join(home, '.cache/Microsoft'),
    debugLogs: () => readdirSync(tmp).filter((name) => name.startsWith('mat-debug-')),
    /** What ONNX Runtime's telemetry leaves in TMPDIR: its debug log, its session file. */
    leftovers: () => readdirSync(tmp).filter((name) => name.startsWith('mat-debug-') || name.endsWith('.ses')),
  };
}

t.test('the runtime alone, without the opt-out, keeps a device id and a debug log', async (t) => {
  const { env, deviceId, debugLogs } = folders();
  const script = `import ort from 'onnxruntime-node';
await ort.InferenceSession.create(${JSON.stringify(join(ROOT, 'models/tissue-seg/model.onnx'))});`;
  await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  t.ok(existsSync(deviceId), `ONNX Runtime's device id at ${deviceId}`);
  t.equal(debugLogs().length, 1, 'one mat-debug log in TMPDIR');
});

t.test('the service: no device id, no event queue, nothing in TMPDIR', async (t) => {
  const { env, deviceId, cacheAtHome, leftovers } = folders();
  const server = await startServer({ models: [{ name: 'tissue-seg', instances: 1 }], env });
  t.teardown(() => server.stop());
  const res = await server.post('/api/predict/tissue-seg', tileRequest(cellularPng(5, 512), { resolution: 8 }));
  t.equal(res.status, 200, 'a tile served: the worker ran its session');
  await server.stop();
  t.notOk(existsSync(deviceId), 'no device id under XDG_CACHE_HOME');
  t.notOk(existsSync(cacheAtHome), 'none under HOME/.cache either');
  t.same(leftovers(), [], 'no mat-debug log or .ses file in TMPDIR');
});
