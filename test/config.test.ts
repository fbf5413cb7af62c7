// Configuration errors a person reads: each names where (file and field, or environment variable),
// the value and what was expected, with a suggestion for a misspelling. In process; the real
// binary's exit status and single line are in startup-errors.test.ts.
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config/config.js';
import { checkListenAddress } from '../supervisor/preflight.js';
import { describeService } from '../supervisor/cli.js';
import { MODELS } from './helpers/server.js';
import { corruptPackage } from './helpers/packages.js';

const dir = mkdtempSync(join(tmpdir(), 'config-'));
let files = 0;
function load(config: Record<string, unknown> | string, env: Record<string, string> = {}) {
  const file = join(dir, `config-${files++}.json`);
  writeFileSync(file, typeof config === 'string' ? config : JSON.stringify({ model_repository: MODELS, port: 0, ...config }));
  return loadConfig({ CONFIG: file, ...env });
}
const good = { models: [{ name: 'tissue-seg', gpus: [] }] };
const refusal = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('accepted');
};

t.test('settings: where, the value, what was expected', async (t) => {
  t.equal(refusal(() => load(good, { PORT: 'abc' })), 'PORT is "abc", expected an integer from 0 to 65535', 'PORT is blamed, not the file');
  t.match(refusal(() => load({ ...good, port: 'abc' })), /config-\d+\.json: port is "abc", expected an integer from 0 to 65535$/, 'the file when the file says it');
  t.match(refusal(() => load({ ...good, gpu: 0 })), /config-\d+\.json: gpu is not a setting \(settings here: host, port, /);
  t.match(refusal(() => load({ ...good, supervisor: { heartbeat_timout_ms: 1 } })), /config-\d+\.json: supervisor\.heartbeat_timout_ms is not a setting \(did you mean heartbeat_timeout_ms\?\)$/);
  t.match(refusal(() => load({ models: [{ name: 'tissue-seg', gpu: [] }] })), /models\[0\]\.gpu is not a setting \(did you mean gpus\?\)$/);
  t.match(refusal(() => load({ models: [] })), /config-\d+\.json: models is \[\], so no model would be served, expected at least one entry such as \{"name": "tissue-seg"\}$/);
  t.match(refusal(() => load({ models: [{ name: 'tissue-seg', gpus: 'atuo' }] })), /models\[0\]\.gpus is "atuo", expected "auto" or a list \(each a string\) \(did you mean "auto"\?\)$/);
  t.match(refusal(() => load({ models: [{ name: 'tissue-seg', provider: ['gpu'] }] })), /models\[0\]\.provider is \["gpu"\], expected "auto" or a list of at least 1 \(each "cuda" or "webgpu" or "cpu"\)$/);
  t.match(refusal(() => load({ models: [{ name: 'tissue-seg', batch_shapes: [0] }] })), /models\[0\]\.batch_shapes is \[0\], expected "auto" or "any" or a list of at least 1 \(each an integer >= 1\)$/);
  t.match(refusal(() => load({ models: [{ nme: 'x' }] })), /models\[0\]\.nme is not a setting \(did you mean name\?\); .*models\[0\]\.name is missing \(required\)$/);
  t.equal(refusal(() => load(good, { LOG_LEVEL: 'inf' })), 'LOG_LEVEL is "inf", expected "fatal" or "error" or "warn" or "info" or "debug" or "trace" or "silent" (did you mean "info"?)');
  t.match(refusal(() => load({ ...good, log_level: 'info', pressure: 3, models: [{ name: 'tissue-seg', instances: 0 }] })), /pressure is 3, expected an object; .*models\[0\]\.instances is 0, expected an integer >= 1$/, 'every problem, on one line');
  t.match(refusal(() => load(good, { MODELS: 'tisue-seg' })), /^MODELS names tisue-seg, not in .*, expected some of tissue-seg \(did you mean tissue-seg\?\)$/);
  t.match(refusal(() => load(good, { MODELS: ' , ' })), /^MODELS is empty, so no model would be served/);
  t.match(refusal(() => load('{"models": [')), /config-\d+\.json: .*JSON/);
  t.match(refusal(() => loadConfig({ CONFIG: join(dir, 'absent.json') })), /absent\.json: no such file \(set CONFIG to the configuration file\)$/);
  t.equal(load(good, { LOG_LEVEL: 'debug', PORT: '8123' }).log_level, 'debug', 'LOG_LEVEL sets the level');
  for (const message of [refusal(() => load({ models: [{ name: 'tissue-seg', gpus: 'atuo' }] }))]) t.notOk(message.includes('\n'), 'one line');
});

t.test('the listen address is checked before anything starts', async (t) => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  t.teardown(() => holder.close());
  const port = (holder.address() as AddressInfo).port;
  const config = load(good);
  const reject = async (host: string, p: number, env: Record<string, string>) =>
    (await checkListenAddress({ ...config, host, port: p }, env).then(() => new Error('accepted'), (err) => err)) as Error;
  t.match((await reject('127.0.0.1', port, { PORT: String(port) })).message, `PORT is ${port} on 127.0.0.1, which is already in use by another process, expected a free port`);
  t.match((await reject('127.0.0.1', port, { CONFIG: '/etc/tile/config.json' })).message, `/etc/tile/config.json: port is ${port} on 127.0.0.1, which is already in use`);
  t.match((await reject('no-such-host.invalid', 0, { HOST: 'no-such-host.invalid' })).message, /^HOST is "no-such-host\.invalid", which does not resolve \(E[A-Z_]+\), expected an IP address or a hostname of this machine$/);
  t.match((await reject('192.0.2.1', 0, { HOST: '192.0.2.1' })).message, /^HOST is "192\.0\.2\.1" \(192\.0\.2\.1\), which is not an address of this machine/);
  await t.resolves(checkListenAddress({ ...config, host: '127.0.0.1', port: 0 }, {}), 'a free address passes');
});

t.test('describeService reads every package without loading a session', async (t) => {
  const config = load({ models: [{ name: 'tile-embed', gpus: [] }, { name: 'tissue-seg', path: corruptPackage('tissue-seg') }, { name: 'gene-expr', path: join(dir, 'missing') }] });
  const { lines, problems } = describeService(config);
  t.match(lines[0], /^listening on http:\/\/127\.0\.0\.1:0, 3 model\(s\):$/);
  t.match(lines[1], /tile-embed 1\.0\.0: embedding; 224x224 at 0\.5 MPP; 1 instance\(s\), gpus \[\]; sha256 [0-9a-f]{12}; POST \/api\/embed\/tile-embed$/);
  t.match(lines[2], /tissue-seg 1\.0\.0: segmentation; 512x512 at 8 MPP/, 'a truncated model.onnx is not parsed: ONNX Runtime would find it when loading');
  t.equal(problems.length, 1);
  t.match(problems[0], /^model gene-expr: .*missing\/manifest\.json: cannot read manifest/);
});
