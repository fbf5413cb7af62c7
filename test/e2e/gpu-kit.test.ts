// The GPU kit as an operator carries it: `npm run build:slim -- --bench --vulkan-loader` on this
// clone gives one .tar.xz of at most 60 MiB; unpacked elsewhere, its bin/gpu-report runs from
// another folder with no node on PATH and no network, on lavapipe (the webgpu tests' software
// Vulkan device) with the smallest shipped model, and reports the host, cpu and webgpu measured,
// and cuda as a row with its reason. Slow: the build compresses ~300 MB with xz, and lavapipe
// compiles the model's shaders on the CPU.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../helpers/server.js';
import { vulkanDevices } from '../../src/gpu/vulkan.js';
import { tempDir } from '../../tools/temp-dir.js';

type Json = Record<string, any>;
const env = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => k !== 'NODE_OPTIONS' && !k.startsWith('TAP') && !/^npm_/i.test(k)),
);

// The build takes ~2 min of xz on 2 idle cores (3.7 CPU-min measured), far longer on a loaded
// machine; then lavapipe. The file's own limit, above .taprc's 240 s.
t.setTimeout(45 * 60 * 1000);
const built = tempDir('gpu-kit');
const started = Date.now();
const build = spawnSync(
  '/bin/sh',
  [
    '-c',
    'unset NODE_OPTIONS; exec "$0" "$@"',
    process.execPath,
    join(ROOT, 'dist/tools/slim-build.js'),
    '--bench',
    '--vulkan-loader',
    `--out=${join(built, 'kit')}`,
  ],
  { env, encoding: 'utf8', timeout: 1500000 },
);
const buildSeconds = Math.round((Date.now() - started) / 1000);

t.test(
  'npm run build:slim -- --bench --vulkan-loader: one archive of at most 60 MiB',
  { timeout: 1600000 },
  async (t) => {
    t.equal(build.status, 0, `build:slim (${buildSeconds} s)`, { stderr: build.stderr.slice(-2000) });
    const archive = join(built, 'kit.tar.xz');
    const size = statSync(archive).size;
    t.ok(size <= 60 * 2 ** 20, `${(size / 2 ** 20).toFixed(1)} MiB`);
    const ort = join(built, 'kit/node_modules/onnxruntime-node/bin/napi-v6');
    t.same(
      readdirSync(ort).map((p) => `${p}/${readdirSync(join(ort, p)).join(',')}`),
      [`${process.platform}/${process.arch}`],
      "this platform's ONNX Runtime only",
    );
    t.same(
      readdirSync(join(built, 'kit/lib')).sort(),
      ['libEGL.so.1', 'libGLdispatch.so.0', 'libvulkan.so.1'],
      "the Vulkan loader and the libglvnd libraries NVIDIA's Vulkan driver opens",
    );
  },
);

const devices = vulkanDevices() ?? [];
t.test('bin/gpu-report from the unpacked kit, elsewhere, without node on PATH', { timeout: 1200000 }, async (t) => {
  if (build.status !== 0) return t.fail('no kit');
  if (devices.length === 0 && !process.env.CI)
    return t.pass('skipped: no Vulkan device here (Debian: mesa-vulkan-drivers from bookworm-backports)');
  const unpacked = tempDir('gpu-kit-unpacked');
  const untar = spawnSync('tar', ['-xJf', join(built, 'kit.tar.xz'), '-C', unpacked], { encoding: 'utf8' });
  t.equal(untar.status, 0, 'unpacked', { stderr: untar.stderr });
  const elsewhere = tempDir('gpu-report');
  // PATH without node (nor npm); the kit's own loader is used before the system's. lavapipe on a
  // shared 2-core machine: a budget above the 10 minutes a GPU host gets.
  const report = spawnSync(
    join(unpacked, 'kit/bin/gpu-report'),
    [
      '--models=tissue-seg',
      '--max-batch=1',
      '--concurrency=2,4',
      '--seconds=8',
      '--floor-seconds=1',
      '--tiles=2',
      '--budget=1000',
      '--out=report.json',
    ],
    {
      cwd: elsewhere,
      env: { ...env, PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      encoding: 'utf8',
      timeout: 1100000,
    },
  );
  t.equal(report.status, 0, 'gpu-report', { stderr: report.stderr.slice(-3000) });
  const json = JSON.parse(readFileSync(join(elsewhere, 'report.json'), 'utf8')) as Json;
  t.equal(readFileSync(join(elsewhere, 'report.md'), 'utf8'), report.stdout, 'the Markdown printed is the one written');
  t.match(report.stdout, /\| model \| provider \| status \|/);
  t.match(json.host, { gpus: null, gpus_note: 'no nvidia-smi', vulkan_loader: /the kit's lib\/libvulkan\.so\.1/ });
  t.ok(
    json.host.vulkan.some((d: Json) => d.software),
    `Vulkan devices: ${json.host.vulkan_note}`,
  );
  const row = (provider: string) =>
    json.rows.find((r: Json) => r.model === 'tissue-seg' && r.provider === provider) as Json;
  for (const provider of ['cpu', 'webgpu']) {
    const r = row(provider);
    t.equal(r.status, 'ok', `${provider}: measured`, { steps: r.steps, reason: r.reason });
    t.ok(r.warmup_ms.length > 0, `${provider}: warm-up per batch shape`);
    t.same(
      r.load.map((l: Json) => l.concurrency),
      [2, 4],
      `${provider}: both concurrencies`,
    );
    for (const l of r.load)
      t.ok(
        l.tilesPerSec > 0 && l.errors === 0 && l.over_floor > 0,
        `${provider} c=${l.concurrency}: ${l.tilesPerSec.toFixed(2)} tiles/s, no errors, against the floor`,
      );
    t.ok(r.floor.best?.tilesPerSec > 0, `${provider}: the floor`);
  }
  t.ok(row('webgpu').workers[0].adapter.includes('(software)'), 'webgpu ran on the software device');
  // A mask: a few boundary pixels may differ from cpu (webgpu.test.ts allows 1/1000).
  const { accuracy } = row('webgpu');
  t.ok(
    accuracy.tiles === 2 && accuracy.differing_values <= accuracy.values / 1000,
    `webgpu against cpu: ${accuracy.differing_values} of ${accuracy.values} values differ`,
  );
  t.match(row('cuda'), { status: 'failed', reason: /cuda/ }, 'cuda: a row with its reason');
});
