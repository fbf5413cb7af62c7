// Configuration errors a person reads: each has its code, and names where (file and field, or
// environment variable), the value and what was expected, with a suggestion for a misspelling. In
// process; the real binary's exit status and single line are in startup-errors.test.ts.
import t from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ConfigError, loadConfig, MAX_TIMER_MS, ServiceConfig } from '../../src/config/config.js';
import type { ConfigCode } from '../../src/config/config-errors.js';
import { checkListenAddress, checkPaths } from '../../supervisor/preflight.js';
import { describeService } from '../../supervisor/cli.js';
import { checkGpus, hostGpu } from '../../supervisor/gpus.js';
import { MODELS } from '../helpers/server.js';
import { corruptPackage } from '../helpers/packages.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('config');
let files = 0;
function load(config: Record<string, unknown> | string, env: Record<string, string> = {}) {
  const file = join(dir, `config-${files++}.json`);
  writeFileSync(
    file,
    typeof config === 'string' ? config : JSON.stringify({ model_repository: MODELS, port: 0, ...config }),
  );
  return loadConfig({ CONFIG: file, ...env });
}
const good = { models: [{ name: 'tissue-seg', gpus: [] }] };
/** The ConfigError fn throws. */
const refusal = (fn: () => unknown): ConfigError => {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('accepted');
};
/** The codes of each problem found, in order. */
const codes = (err: ConfigError) => err.problems.map((p) => p.code);

t.test('settings: a code, and where, the value, what was expected', async (t) => {
  const cases: [string, () => unknown, ConfigCode[], string | RegExp][] = [
    [
      'PORT is blamed, not the file',
      () => load(good, { PORT: 'abc' }),
      ['TILE_ERR_CONFIG_VALUE'],
      'PORT is "abc", expected an integer from 0 to 65535',
    ],
    [
      'the file when the file says it',
      () => load({ ...good, port: 'abc' }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: port is "abc", expected an integer from 0 to 65535$/,
    ],
    [
      'an unknown key lists the settings',
      () => load({ ...good, gpu: 0 }),
      ['TILE_ERR_CONFIG_UNKNOWN_KEY'],
      /config-\d+\.json: gpu is not a setting \(settings here: host, port, /,
    ],
    [
      'a misspelt key',
      () => load({ ...good, supervisor: { heartbeat_timout_ms: 1 } }),
      ['TILE_ERR_CONFIG_UNKNOWN_KEY'],
      /config-\d+\.json: supervisor\.heartbeat_timout_ms is not a setting \(did you mean heartbeat_timeout_ms\?\)$/,
    ],
    [
      'a misspelt key of a model',
      () => load({ models: [{ name: 'tissue-seg', gpu: [] }] }),
      ['TILE_ERR_CONFIG_UNKNOWN_KEY'],
      /models\[0\]\.gpu is not a setting \(did you mean gpus\?\)$/,
    ],
    [
      'an unknown provider',
      () => load({ models: [{ name: 'tissue-seg', provider: ['gpu'] }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.provider\[0\] is "gpu", expected "cuda" or "webgpu" or "cpu" \(did you mean "cpu"\?\)$/,
    ],
    [
      'a list wrong as a whole is named whole',
      () => load({ models: [{ name: 'tissue-seg', provider: ['cpu', 'cpu'] }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.provider is \["cpu","cpu"\], expected "auto" or a list of at least 1 \(each "cuda" or "webgpu" or "cpu"\)$/,
    ],
    [
      'an empty host (fastify listened on every interface)',
      () => load({ ...good, host: '' }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: host is "", expected an IP address or a host name of this machine \(0\.0\.0\.0 or :: for every interface\)$/,
    ],
    [
      'a host in brackets, or with a space',
      () => load({ ...good, host: '[::1]' }, { HOST: ' localhost' }),
      ['TILE_ERR_CONFIG_VALUE'],
      /^HOST is " localhost", expected an IP address or a host name/,
    ],
    [
      'GPU ids that are neither an index nor a UUID, each named',
      () =>
        load({
          models: [
            { name: 'tissue-seg', gpus: ['../x', '999', 'GPU-5c2e7a41-9d0b-3f4e-8b7a-1f2e3d4c5b6a', '0000:3b:00.0'] },
          ],
        }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.gpus\[0\] is "\.\.\/x", expected a GPU index as nvidia-smi numbers GPUs \("0", "1", \.\.\.\), or a GPU or MIG device UUID .*; \S+ models\[0\]\.gpus\[3\] is "0000:3b:00\.0", expected a GPU index/,
    ],
    [
      'MIG device ids: a UUID, or a GPU UUID with its two instances (drivers before R470), not less',
      () =>
        load({
          models: [
            {
              name: 'tissue-seg',
              gpus: [
                'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f',
                'MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c/1/0',
                'MIG-c6d4f1ef',
                'MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c/1',
                'MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c/1/0/2',
                'MIG-1',
              ],
            },
          ],
        }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.gpus\[2\] is "MIG-c6d4f1ef", expected .* \("GPU-" or "MIG-" then 36 hex digits and dashes; before driver R470, MIG-GPU-<uuid>\/<gi>\/<ci>\); .*gpus\[3\] is .*gpus\[4\] is .*gpus\[5\] is "MIG-1", expected /,
    ],
    [
      'sizes and counts no host needs (1e18 bytes of body passed)',
      () =>
        load({
          body_limit_bytes: 1e18,
          front: { max_inflight_bytes: 1e18 },
          usage: { recent_entries: 1e9 },
          models: [{ name: 'tissue-seg', max_queue: 1e9 }],
        }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /body_limit_bytes is 1000000000000000000, expected an integer from 1024 to 1073741824; .*front\.max_inflight_bytes is 1000000000000000000, expected an integer from 1024 to 274877906944; .*usage\.recent_entries is 1000000000, expected an integer from 1 to 100000; .*models\[0\]\.max_queue is 1000000000, expected an integer from 1 to 1048576$/,
    ],
    [
      'tile pixels, connections, heap and a usage file past any host (1e18 passed)',
      () =>
        load({
          ...good,
          max_tile_pixels: 1e18,
          front: { max_connections: 1e9 },
          pressure: { max_heap_used_bytes: 1e18 },
          usage: { max_file_bytes: 1e12 },
        }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: max_tile_pixels is 1000000000000000000, expected an integer from 1 to 268435456; .*front\.max_connections is 1000000000, expected an integer from 0 to 1048576; .*pressure\.max_heap_used_bytes is 1000000000000000000, expected an integer from 0 to 1099511627776; .*usage\.max_file_bytes is 1000000000000, expected an integer from 1024 to 268435456$/,
    ],
    [
      'a Retry-After of a year (any integer passed; a client stays away that long)',
      () => load({ ...good, pressure: { retry_after_s: 365 * 86400 } }),
      ['TILE_ERR_CONFIG_VALUE'],
      /pressure\.retry_after_s is 31536000, expected an integer from 1 to 3600$/,
    ],
    [
      'a batch shape of 0',
      () => load({ models: [{ name: 'tissue-seg', batch_shapes: [0] }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.batch_shapes\[0\] is 0, expected an integer from 1 to 4096$/,
    ],
    [
      'a largest batch past the bound (a worker listed every size up to it)',
      () => load({ models: [{ name: 'tissue-seg', max_batch: 1e9 }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.max_batch is 1000000000, expected an integer from 1 to 4096$/,
    ],
    [
      'headers allowed longer than the whole request',
      () => load({ ...good, front: { body_timeout_ms: 3000 } }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: front\.headers_timeout_ms is 10000, longer than front\.body_timeout_ms \(3000\), .*expected at most 3000$/,
    ],
    [
      'a body limit past the bytes a front holds (such a body was a 503 "retry later" for ever)',
      () => load({ ...good, body_limit_bytes: 32 << 20, front: { max_inflight_bytes: 16 << 20 } }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: body_limit_bytes is 33554432, more than front\.max_inflight_bytes \(16777216\), the request bytes a front holds at once, so a body that large could never be read: expected at most 16777216 \(or a larger front\.max_inflight_bytes\)$/,
    ],
    [
      'no models',
      () => load({ models: [] }),
      ['TILE_ERR_CONFIG_NO_MODELS'],
      /config-\d+\.json: models is \[\], so no model would be served, expected at least one entry such as \{"name": "tissue-seg"\}$/,
    ],
    [
      'a misspelt value',
      () => load({ models: [{ name: 'tissue-seg', gpus: 'atuo' }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.gpus is "atuo", expected "auto" or a list \(each a GPU index as nvidia-smi numbers GPUs \("0", "1", \.\.\.\), or a GPU or MIG device UUID as nvidia-smi -L prints it \("GPU-" or "MIG-" then 36 hex digits and dashes; before driver R470, MIG-GPU-<uuid>\/<gi>\/<ci>\)\) \(did you mean "auto"\?\)$/,
    ],
    [
      'a misspelt key and so a missing one',
      () => load({ models: [{ nme: 'x' }] }),
      ['TILE_ERR_CONFIG_UNKNOWN_KEY', 'TILE_ERR_CONFIG_MISSING_KEY'],
      /models\[0\]\.nme is not a setting \(did you mean name\?\); .*models\[0\]\.name is missing \(required\)$/,
    ],
    [
      'LOG_LEVEL',
      () => load(good, { LOG_LEVEL: 'inf' }),
      ['TILE_ERR_CONFIG_VALUE'],
      'LOG_LEVEL is "inf", expected "fatal" or "error" or "warn" or "info" or "debug" or "trace" or "silent" (did you mean "info"?)',
    ],
    [
      'every problem, on one line',
      () => load({ ...good, log_level: 'info', pressure: 3, models: [{ name: 'tissue-seg', instances: 0 }] }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /pressure is 3, expected an object; .*models\[0\]\.instances is 0, expected an integer from 1 to 256$/,
    ],
    [
      'MODELS names a model the file lacks',
      () => load(good, { MODELS: 'tisue-seg' }),
      ['TILE_ERR_CONFIG_UNKNOWN_MODEL'],
      /^MODELS names tisue-seg, not in .*, expected some of tissue-seg \(did you mean tissue-seg\?\)$/,
    ],
    [
      'MODELS empty',
      () => load(good, { MODELS: ' , ' }),
      ['TILE_ERR_CONFIG_NO_MODELS'],
      /^MODELS is empty, so no model would be served/,
    ],
    [
      'the same model twice (every front died declaring its routes again)',
      () => load({ models: [{ name: 'tissue-seg' }, { name: 'gene-expr' }, { name: 'tissue-seg', instances: 2 }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: models\[2\]\.name is "tissue-seg", as is models\[0\]\.name, expected each model listed once \(more workers for a model: its instances\)$/,
    ],
    [
      'gRPC on the HTTP port (every front died binding it twice)',
      () => load({ ...good, port: 8000, grpc_port: 8000 }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: grpc_port is 8000, the same as \S+config-\d+\.json: port \(HTTP\), expected another port \(or null for no gRPC\)$/,
    ],
    [
      'gRPC on the port PORT names',
      () => load({ ...good, grpc_port: 8001 }, { PORT: '8001' }),
      ['TILE_ERR_CONFIG_VALUE'],
      /config-\d+\.json: grpc_port is 8001, the same as PORT \(HTTP\), expected another port/,
    ],
    [
      'a timeout past what a Node timer holds (every request was a 504 at once)',
      () => load({ models: [{ name: 'tissue-seg', request_timeout_ms: 3e9 }] }),
      ['TILE_ERR_CONFIG_VALUE'],
      /models\[0\]\.request_timeout_ms is 3000000000, expected an integer from 1 to 2147483647$/,
    ],
    [
      'an interval past what a Node timer holds (a 1 ms loop)',
      () => load({ ...good, supervisor: { heartbeat_interval_ms: 3e9 } }),
      ['TILE_ERR_CONFIG_VALUE'],
      /supervisor\.heartbeat_interval_ms is 3000000000, expected an integer from 10 to 2147483647$/,
    ],
    [
      'processes and threads a host cannot hold',
      () => load({ fronts: 100000, models: [{ name: 'tissue-seg', instances: 1e6, intra_op_threads: 1e6 }] }),
      ['TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE', 'TILE_ERR_CONFIG_VALUE'],
      /fronts is 100000, expected an integer from 0 to 256; .*models\[0\]\.instances is 1000000, expected an integer from 1 to 256; .*models\[0\]\.intra_op_threads is 1000000, expected an integer from 1 to 1024$/,
    ],
    ['not JSON', () => load('{"models": ['), ['TILE_ERR_CONFIG_FILE'], /config-\d+\.json: .*JSON/],
    [
      'no file',
      () => loadConfig({ CONFIG: join(dir, 'absent.json') }),
      ['TILE_ERR_CONFIG_FILE'],
      /absent\.json: no such file \(set CONFIG to the configuration file\)$/,
    ],
  ];
  for (const [name, fn, problems, message] of cases) {
    const err = refusal(fn);
    t.same(codes(err), problems, `${name}: ${problems.join(', ')}`);
    t.equal(err.code, problems[0], `${name}: the error's code is its first problem's`);
    if (typeof message === 'string') t.equal(err.message, message, name);
    else t.match(err.message, message, name);
    t.notOk(err.message.includes('\n'), `${name}: one line`);
  }
  t.equal(load(good, { LOG_LEVEL: 'debug', PORT: '8123' }).log_level, 'debug', 'LOG_LEVEL sets the level');
  const bounds = {
    max_tile_pixels: 16384 ** 2,
    front: { max_connections: 2 ** 20 },
    pressure: { max_heap_used_bytes: 1024 ** 4, retry_after_s: 3600 },
    usage: { max_file_bytes: 256 * 1024 ** 2 },
  };
  t.match(load({ ...good, ...bounds }), bounds, 'each bound itself is taken');
  const equal = { body_limit_bytes: 4096, front: { max_inflight_bytes: 4096 } };
  t.match(load({ ...good, ...equal }), equal, 'a body limit of the whole budget is taken');
  // A small host's config that sets only the budget: the default limit comes down to it.
  const small = load({ ...good, front: { max_inflight_bytes: 8 << 20 } });
  t.equal(small.body_limit_bytes, 8 << 20, 'the default body limit is the budget where that is smaller');
  t.equal(load(good).body_limit_bytes, 16 << 20, 'and 16 MiB otherwise');
});

/** Every object schema in `schema`, with its dotted place ("models[]" for a list's items). */
function objects(schema: Record<string, any>, place = ''): [string, Record<string, any>][] {
  if (schema.type === 'array') return objects(schema.items, `${place}[]`);
  if (schema.anyOf) return schema.anyOf.flatMap((s: Record<string, any>) => objects(s, place));
  if (schema.type !== 'object') return [];
  return [
    [place, schema],
    ...Object.entries(schema.properties ?? {}).flatMap(([key, s]) =>
      objects(s as Record<string, any>, place ? `${place}.${key}` : key),
    ),
  ];
}

t.test('every object refuses a misspelt key, and no millisecond setting passes a timer', async (t) => {
  const found = objects(ServiceConfig);
  t.ok(found.length >= 7, 'the root, models[], front, supervisor, pressure, usage, health');
  for (const [place, schema] of found) {
    const key = `${Object.keys(schema.properties)[0]}x`;
    // The typo placed in an otherwise good configuration.
    const config: Record<string, any> = { ...good, models: [{ name: 'tissue-seg', gpus: [] }] };
    if (place === '') config[key] = 1;
    else if (place === 'models[]') config.models[0][key] = 1;
    else config[place] = { [key]: 1 };
    const err = refusal(() => load(config));
    t.same(codes(err), ['TILE_ERR_CONFIG_UNKNOWN_KEY'], `${place || '(root)'}: ${err.message}`);
    t.match(err.message, `${place ? `${place.replace('[]', '[0]')}.` : ''}${key} is not a setting`);
    for (const [name, s] of Object.entries(schema.properties as Record<string, any>))
      if (name.endsWith('_ms')) t.equal(s.maximum, MAX_TIMER_MS, `${place}.${name} at most 2^31 - 1`);
  }
});

t.test('log_file and data_dir must be writable where they are', async (t) => {
  const config = load(good);
  const file = join(dir, 'a-file');
  writeFileSync(file, '');
  mkdirSync(join(dir, 'a-folder'));
  const problems = (paths: Partial<ServiceConfig>) =>
    checkPaths({ ...config, ...paths }, { CONFIG: '/etc/tile/config.json' }).map((e) => [e.code, e.message]);
  t.same(problems({ log_file: join(dir, 'new/logs/service.log'), data_dir: join(dir, 'new/data') }), [], 'created');
  t.same(problems({ log_file: file, data_dir: join(dir, 'a-folder') }), [], 'there already');
  t.same(problems({ log_file: join(dir, 'a-folder'), data_dir: file }), [
    [
      'TILE_ERR_CONFIG_PATH',
      `/etc/tile/config.json: log_file is "${join(dir, 'a-folder')}", a folder, expected a file this user can write (or a path where one can be created)`,
    ],
    [
      'TILE_ERR_CONFIG_PATH',
      `/etc/tile/config.json: data_dir is "${file}", not a folder, expected a folder this user can write (or a path where one can be created)`,
    ],
  ]);
  const [under] = checkPaths({ ...config, log_file: join(file, 'logs/service.log') }, { LOG_FILE: 'x' });
  t.equal(
    under.message,
    `LOG_FILE is "${join(file, 'logs/service.log')}", under ${file}, which is not a folder, expected a file this user can write (or a path where one can be created)`,
  );
});

t.test('the listen address is checked before anything starts', async (t) => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  t.teardown(() => holder.close());
  const port = (holder.address() as AddressInfo).port;
  const config = load(good);
  const reject = async (host: string, p: number, env: Record<string, string>) =>
    (await checkListenAddress({ ...config, host, port: p }, env).then(
      () => new Error('accepted'),
      (err) => err,
    )) as ConfigError;
  const cases: [Promise<ConfigError>, ConfigCode, string | RegExp][] = [
    [
      reject('127.0.0.1', port, { PORT: String(port) }),
      'TILE_ERR_LISTEN_PORT_IN_USE',
      `PORT is ${port} on 127.0.0.1, which is already in use by another process, expected a free port`,
    ],
    [
      reject('127.0.0.1', port, { CONFIG: '/etc/tile/config.json' }),
      'TILE_ERR_LISTEN_PORT_IN_USE',
      `/etc/tile/config.json: port is ${port} on 127.0.0.1, which is already in use`,
    ],
    [
      reject('no-such-host.invalid', 0, { HOST: 'no-such-host.invalid' }),
      'TILE_ERR_LISTEN_HOST',
      /^HOST is "no-such-host\.invalid", which does not resolve \(E[A-Z_]+\), expected an IP address or a hostname of this machine$/,
    ],
    [
      reject('192.0.2.1', 0, { HOST: '192.0.2.1' }),
      'TILE_ERR_LISTEN_HOST',
      /^HOST is "192\.0\.2\.1" \(192\.0\.2\.1\), which is not an address of this machine/,
    ],
  ];
  for (const [refused, code, message] of cases) {
    const err = await refused;
    t.type(err, ConfigError);
    t.equal(err.code, code, err.message);
    t.match(err.message, message);
  }
  await t.resolves(checkListenAddress({ ...config, host: '127.0.0.1', port: 0 }, {}), 'a free address passes');
});

t.test('describeService reads every package and loads its graph', async (t) => {
  const config = load({
    models: [
      { name: 'tile-embed', gpus: [] },
      { name: 'tissue-seg', path: corruptPackage('tissue-seg') },
      { name: 'gene-expr', path: join(dir, 'missing') },
    ],
  });
  const { lines, problems } = await describeService(config);
  t.match(lines[0], /^listening on http:\/\/127\.0\.0\.1:0, 3 model\(s\):$/);
  t.match(
    lines[1],
    /tile-embed 1\.0\.0: embedding; 224x224 at 0\.5 MPP; 1 instance\(s\), gpus \[\]; sha256 [0-9a-f]{12}; POST \/api\/embed\/tile-embed$/,
  );
  t.equal(lines.length, 2, 'only the model that would serve is described');
  t.same(
    problems.map((p) => p.code),
    ['TILE_ERR_MODEL_LOAD', 'TILE_ERR_PACKAGE_MANIFEST_UNREADABLE'],
  );
  t.match(problems[0].message, /^model tissue-seg: \S+\/tissue-seg\/model\.onnx: ONNX Runtime cannot load the graph: /);
  t.match(problems[1].message, /^model gene-expr: .*missing\/manifest\.json: cannot read manifest/);
});

t.test('--check-config checks listed GPUs against nvidia-smi, or says it cannot', async (t) => {
  const gpu = (index: string, uuid: string) => ({
    index,
    name: 'NVIDIA H100',
    uuid,
    pci_bus_id: `00000000:1${index}:00.0`,
    memory_total_mib: 81559,
    memory_used_mib: 0,
    utilization_pct: 0,
    driver: '550.54.15',
  });
  const host = [
    gpu('0', 'GPU-5c2e7a41-9d0b-3f4e-8b7a-1f2e3d4c5b6a'),
    gpu('1', 'GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90'),
  ];
  const config = load({
    models: [
      { name: 'tissue-seg', gpus: ['1', 'GPU-A1B2C3D4-E5F6-0718-293A-4B5C6D7E8F90'] },
      { name: 'gene-expr', gpus: ['0', '7'] },
      { name: 'tile-embed' },
    ],
  });
  const env = { CONFIG: '/etc/tile/config.json' };
  const found = await checkGpus(config, env, async () => host);
  t.same(found.lines, []);
  t.same(
    found.problems.map((p) => [p.code, p.message]),
    [
      [
        'TILE_ERR_CONFIG_GPU',
        '/etc/tile/config.json: models[1].gpus[1] is "7", not a GPU of this host (nvidia-smi lists 0, 1), expected one of their indices or UUIDs',
      ],
    ],
    'an index past the host GPUs; a UUID in either case is found',
  );
  t.equal(hostGpu(host, 'GPU-A1B2C3D4-E5F6-0718-293A-4B5C6D7E8F90')?.index, '1', 'a UUID pins as its index does');
  const ok = await checkGpus({ ...config, models: [config.models[0]] }, env, async () => host);
  t.same(ok, {
    lines: ['GPUs: tissue-seg ["1","GPU-A1B2C3D4-E5F6-0718-293A-4B5C6D7E8F90"] among those nvidia-smi lists'],
    problems: [],
  });
  const absent = await checkGpus(config, env, async () => null);
  t.same(absent.problems, []);
  t.match(absent.lines, [/^GPUs: tissue-seg .*, gene-expr \["0","7"\] not checked: nvidia-smi is not installed$/]);
  const failing = await checkGpus(config, env, async () => {
    throw new Error('nvidia-smi failed: NVIDIA-SMI has failed');
  });
  t.match(failing.lines, [/not checked: nvidia-smi failed: NVIDIA-SMI has failed$/]);
  t.same(
    await checkGpus(load(good), env, async () => host),
    { lines: [], problems: [] },
    'nothing listed, nothing run',
  );
  let listAsked = false;
  await checkGpus(
    config,
    env,
    async () => host,
    async () => ((listAsked = true), []),
  );
  t.notOk(listAsked, 'no MIG device listed: nvidia-smi -L not run');

  // MIG devices are checked against nvidia-smi -L, GPUs still against the query.
  const mig = [
    { uuid: 'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f', gpu: '0', name: 'MIG 3g.20gb Device 0' },
    { uuid: 'MIG-GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90/1/0', gpu: '1', name: 'MIG 3g.20gb Device 0' },
  ];
  const migConfig = load({
    models: [
      {
        name: 'tissue-seg',
        gpus: ['MIG-C6D4F1EF-42E4-5DE3-91C7-45D71C87EB3F', 'MIG-GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90/1/0', '1'],
      },
      { name: 'gene-expr', gpus: ['MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb', '7'] },
    ],
  });
  const migFound = await checkGpus(
    migConfig,
    env,
    async () => host,
    async () => mig,
  );
  t.same(
    migFound.problems.map((p) => [p.code, p.message]),
    [
      [
        'TILE_ERR_CONFIG_GPU',
        '/etc/tile/config.json: models[1].gpus[0] is "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb", not a MIG device of this host (nvidia-smi -L lists MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f on GPU 0, MIG-GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90/1/0 on GPU 1), expected one of their UUIDs',
      ],
      [
        'TILE_ERR_CONFIG_GPU',
        '/etc/tile/config.json: models[1].gpus[1] is "7", not a GPU of this host (nvidia-smi lists 0, 1), expected one of their indices or UUIDs',
      ],
    ],
    'a MIG device -L does not list; those it lists, in either form and case, are found',
  );
  t.match(
    (
      await checkGpus(
        migConfig,
        env,
        async () => host,
        async () => [],
      )
    ).problems.map((p) => p.message),
    [
      /gpus\[0\] is "MIG-C6D4.*not a MIG device of this host \(nvidia-smi -L lists none\)/,
      /gpus\[1\]/,
      /gpus\[0\]/,
      /gpus\[1\]/,
    ],
    'a host without MIG devices',
  );
  t.match(
    (
      await checkGpus(
        migConfig,
        env,
        async () => host,
        async () => {
          throw new Error('nvidia-smi did not answer within 2000 ms');
        },
      )
    ).lines,
    [/^GPUs: .* not checked: nvidia-smi did not answer within 2000 ms$/],
  );
});

t.test('a host that names no address is refused, not listened on everywhere', async (t) => {
  const err = await checkListenAddress({ ...load(good), host: '' }, {}).then(
    () => new Error('accepted'),
    (e) => e,
  );
  t.equal((err as ConfigError).code, 'TILE_ERR_LISTEN_HOST');
  t.match(err.message, /host is "", which names no address, expected an IP address or a hostname of this machine/);
});
