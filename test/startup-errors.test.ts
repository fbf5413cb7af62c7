// The real binary refuses a bad configuration or address before any worker forks: one line on
// stderr and exit status 2; --help and --check-config answer and exit. (Every message is checked
// in process by test/shared/config.ts; these few spawns prove the wiring.)
import t from 'tap';
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ExitCode } from '../src/lib/exit-codes.js';
import { ROOT, MODELS } from './helpers/server.js';
import { copyPackage, fakeNvidiaSmi } from './helpers/packages.js';
import { cleanEnv as serviceEnv } from '../tools/service-process.js';
import { tempDir } from '../tools/temp-dir.js';
import { packageDigest } from '../src/model-package/package-digest.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

const dir = tempDir('startup');
let files = 0;
const good = {
  models: [
    { name: 'tissue-seg', gpus: [] },
    { name: 'gene-expr', instances: 2 },
  ],
};

function start(config: Record<string, unknown>, env: Record<string, string> = {}, args: string[] = []): Promise<Run> {
  const file = join(dir, `config-${files++}.json`);
  writeFileSync(file, JSON.stringify({ model_repository: MODELS, port: 0, ...config }));
  const base = Object.fromEntries(
    Object.entries(serviceEnv()).filter(([k]) => !['PORT', 'HOST', 'MODELS', 'LOG_LEVEL', 'LOG_FILE'].includes(k)),
  );
  return new Promise((resolve) => {
    // Through sh, so that tap's spawn hooks cannot put their loaders back into NODE_OPTIONS.
    const argv = [
      '-c',
      'unset NODE_OPTIONS; exec "$0" "$@"',
      process.execPath,
      join(ROOT, 'dist/supervisor/main.js'),
      ...args,
    ];
    execFile(
      '/bin/sh',
      argv,
      { cwd: ROOT, timeout: 60000, env: { ...base, CONFIG: file, ...env } },
      (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr });
      },
    );
  });
}

// A download cut short: the package's files are all there, its graph a tenth of itself.
const truncated = copyPackage('gene-expr');
const graph = readFileSync(join(truncated, 'model.onnx'));
writeFileSync(join(truncated, 'model.onnx'), graph.subarray(0, graph.length / 10));

// A digest cache as the workers leave it in data_dir (the shipped files are old enough to be
// cached), its sums for tissue-seg then altered: --check-config's sha256 shows it read them.
const cachedData = join(tempDir('startup'), 'data');
packageDigest(join(MODELS, 'tissue-seg'), { folder: cachedData });
const [cacheName] = readdirSync(join(cachedData, 'package-digests'));
const cacheFile = join(cachedData, 'package-digests', cacheName);
const altered = JSON.parse(readFileSync(cacheFile, 'utf8'));
for (const entry of Object.values<{ sha256: string }>(altered.files)) entry.sha256 = '0'.repeat(64);
writeFileSync(cacheFile, JSON.stringify(altered));
const alteredDigest = packageDigest(join(MODELS, 'tissue-seg'), { folder: cachedData, readOnly: true });

const holder = createServer();
await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
const busy = (holder.address() as AddressInfo).port;
// All at once: each is a Node start, seconds on a busy machine.
// Two GPUs, as nvidia-smi lists them.
const hostGpus = [
  '0, NVIDIA H100 80GB HBM3, GPU-5c2e7a41-9d0b-3f4e-8b7a-1f2e3d4c5b6a, 00000000:18:00.0, 81559, 1024, 3, 550.54.15',
  '1, NVIDIA H100 80GB HBM3, GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90, 00000000:3B:00.0, 81559, 2048, 7, 550.54.15',
];
const twoGpus = fakeNvidiaSmi(hostGpus);
// The same, GPU 1 in MIG mode with one MIG device (nvidia-smi -L lists it under GPU 1).
const MIG = 'MIG-0e6b6e4c-7d3a-5b8e-9f10-2a3b4c5d6e7f';
const migGpus = fakeNvidiaSmi(hostGpus, null, { 1: [MIG] });
const [
  badPort,
  unknownKey,
  portInUse,
  help,
  check,
  badOption,
  checkTruncated,
  cudaOnly,
  logFolder,
  checkDataFile,
  checkMissingGpu,
  checkMig,
  checkCached,
] = await Promise.all([
  start(good, { PORT: 'abc' }),
  start({ ...good, supervisor: { heartbeat_timout_ms: 5000 } }),
  start({ ...good, port: busy }),
  start(good, {}, ['--help']),
  start(good, {}, ['--check-config']),
  start(good, {}, ['--chek-config']),
  start({ models: [{ name: 'tissue-seg' }, { name: 'gene-expr', path: truncated }] }, {}, ['--check-config']),
  start({ models: [{ name: 'tissue-seg', gpus: [], provider: ['cuda'] }] }, {}, ['--check-config']),
  // The logger's folder-as-file killed the supervisor with an unhandled EISDIR stack.
  start(good, { LOG_FILE: dir }),
  start({ ...good, data_dir: join(ROOT, 'package.json') }, {}, ['--check-config']),
  // A GPU index past the host's passed, and its workers saw no GPU.
  start(
    { models: [{ name: 'tissue-seg', gpus: ['1', '7'], provider: ['cpu'] }] },
    { PATH: `${twoGpus}:${process.env.PATH}` },
    ['--check-config'],
  ),
  start(
    { models: [{ name: 'tissue-seg', gpus: [MIG, 'MIG-11111111-2222-3333-4444-555555555555'], provider: ['cpu'] }] },
    { PATH: `${migGpus}:${process.env.PATH}` },
    ['--check-config'],
  ),
  start({ ...good, data_dir: cachedData }, {}, ['--check-config']),
]);
holder.close();

t.test('refusals: exit 2, one line, nothing started', async (t) => {
  const expected: [Run, RegExp][] = [
    [badPort, /^configuration error \[TILE_ERR_CONFIG_VALUE\]: PORT is "abc", expected an integer from 0 to 65535\n$/],
    [
      unknownKey,
      /^configuration error \[TILE_ERR_CONFIG_UNKNOWN_KEY\]: \S+config-1\.json: supervisor\.heartbeat_timout_ms is not a setting \(did you mean heartbeat_timeout_ms\?\)\n$/,
    ],
    [
      badOption,
      /^configuration error \[TILE_ERR_CONFIG_ARGS\]: Unknown option '--chek-config'.*, expected --check-config or --help\n$/,
    ],
    [
      portInUse,
      new RegExp(
        `^configuration error \\[TILE_ERR_LISTEN_PORT_IN_USE\\]: \\S+config-2\\.json: port is ${busy} on 127\\.0\\.0\\.1, which is already in use by another process, expected a free port \\(or PORT=0 for any\\)\\n$`,
      ),
    ],
    [
      logFolder,
      new RegExp(
        `^configuration error \\[TILE_ERR_CONFIG_PATH\\]: LOG_FILE is "${dir}", a folder, expected a file this user can write \\(or a path where one can be created\\)\\n$`,
      ),
    ],
  ];
  for (const [run, pattern] of expected) {
    t.equal(run.code, ExitCode.CONFIG, 'exit status 2');
    t.equal(run.stdout, '', 'no log line: no worker forked');
    t.match(run.stderr, pattern);
  }
});

t.test('--help and --check-config', async (t) => {
  t.equal(help.code, 0);
  t.match(help.stdout, /--check-config[\s\S]*LOG_LEVEL[\s\S]*SIGUSR2/);
  t.equal(check.code, 0, check.stderr);
  t.equal(cudaOnly.code, ExitCode.CONFIG, 'a model that can only run on cuda, without the CUDA provider');
  t.match(
    cudaOnly.stderr,
    /^configuration error \[TILE_ERR_PROVIDER_CUDA_LIBRARIES\]: model tissue-seg: provider \["cuda"\], but the CUDA provider libraries are not installed \(npm run cuda:install\)\n$/,
  );
  t.match(
    check.stdout,
    /config-4\.json: ok\nlistening on http:\/\/127\.0\.0\.1:0, 2 model\(s\):\n {2}tissue-seg 1\.0\.0: segmentation; .*\n {2}gene-expr 1\.1\.0: prediction, embedding; 224x224 at 0\.5 MPP; 2 instance\(s\), gpus "auto"; .*POST \/api\/predict\/gene-expr, POST \/api\/embed\/gene-expr\nexecution providers:\n {2}cuda: provider libraries not installed beside libonnxruntime \d+\.\d+\.\d+ \(.*npm run cuda:install\)\n {2}webgpu: (Vulkan devices: .*|no Vulkan loader .*|no Vulkan device)\n {2}cpu: always\n$/,
  );
});

t.test('--check-config: a data_dir that is a file is a problem', async (t) => {
  t.equal(checkDataFile.code, ExitCode.CONFIG, 'exit status 2');
  t.match(checkDataFile.stdout, /config-9\.json: problems found\n/);
  t.match(
    checkDataFile.stderr,
    /^configuration error \[TILE_ERR_CONFIG_PATH\]: \S+config-9\.json: data_dir is "\S+package\.json", not a folder, expected a folder this user can write/,
  );
});

t.test('--check-config loads each graph: a truncated model.onnx is a problem', async (t) => {
  t.equal(checkTruncated.code, ExitCode.CONFIG, 'exit status 2');
  t.match(
    checkTruncated.stdout,
    /config-6\.json: problems found\n.*\n {2}tissue-seg 1\.0\.0: segmentation; .*\nexecution providers:\n/,
  );
  t.match(
    checkTruncated.stderr,
    /^configuration error \[TILE_ERR_MODEL_LOAD\]: model gene-expr: \S+\/gene-expr\/model\.onnx: ONNX Runtime cannot load the graph: .*\n$/,
  );
});

t.test('--check-config: a GPU the host lacks (by nvidia-smi) is a problem', async (t) => {
  t.equal(checkMissingGpu.code, ExitCode.CONFIG, 'exit status 2');
  t.match(checkMissingGpu.stdout, /config-10\.json: problems found\n/);
  t.match(
    checkMissingGpu.stderr,
    /^configuration error \[TILE_ERR_CONFIG_GPU\]: \S+config-10\.json: models\[0\]\.gpus\[1\] is "7", not a GPU of this host \(nvidia-smi lists 0, 1\), expected one of their indices or UUIDs\n$/,
  );
});

t.test('--check-config reads the package digest cache in data_dir and writes nothing', async (t) => {
  t.equal(checkCached.code, 0, checkCached.stderr);
  t.not(alteredDigest, packageDigest(join(MODELS, 'tissue-seg')));
  t.match(checkCached.stdout, `tissue-seg 1.0.0: segmentation; `);
  t.match(checkCached.stdout, `; sha256 ${alteredDigest.slice(0, 12)}; `, 'the cached sums used');
  t.match(checkCached.stdout, `; sha256 ${packageDigest(join(MODELS, 'gene-expr')).slice(0, 12)}; `);
  t.same(readdirSync(join(cachedData, 'package-digests')), [cacheName], 'no cache written for gene-expr');
});

t.test('--check-config: MIG devices are checked against nvidia-smi -L', async (t) => {
  t.equal(checkMig.code, ExitCode.CONFIG, 'exit status 2');
  t.match(checkMig.stdout, /config-11\.json: problems found\n/);
  t.match(
    checkMig.stderr,
    new RegExp(
      `^configuration error \\[TILE_ERR_CONFIG_GPU\\]: \\S+config-11\\.json: models\\[0\\]\\.gpus\\[1\\] is "MIG-11111111-2222-3333-4444-555555555555", not a MIG device of this host \\(nvidia-smi -L lists ${MIG} on GPU 1\\), expected one of their UUIDs\\n$`,
    ),
    'the one it lists passes; the other is the only problem',
  );
});
