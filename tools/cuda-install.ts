// `npm run cuda:install -- FILE`: puts ONNX Runtime's CUDA provider libraries beside the bundled
// libonnxruntime from a file copied to the host, for hosts that cannot download (onnxruntime-node's
// own install script fetches the NuGet package from nuget.org). FILE is one of:
//   Microsoft.ML.OnnxRuntime.Gpu.Linux.<version>.nupkg   (what that install script downloads)
//   onnxruntime_gpu-<version>-...-linux_x86_64.whl       (the Python wheel)
//   onnxruntime-linux-x64-gpu-<version>.tgz              (the GitHub release archive)
//   a folder holding libonnxruntime_providers_cuda.so and libonnxruntime_providers_shared.so
// The libraries must be from the bundled ONNX Runtime's version: that is checked (the package's
// version and the version string in the CUDA library) before anything is copied, and recorded
// so that workers and --check-config can tell. --dest puts them elsewhere (tests).
import AdmZip from 'adm-zip';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  bundledVersion,
  checkCudaProvider,
  CUDA_LIBRARY,
  INSTALL_RECORD,
  runtimeDir,
  SHARED_LIBRARY,
  TENSORRT_LIBRARY,
  type InstallRecord,
} from '../src/gpu/cuda-provider.js';
import { CodedError, errorLine } from '../src/lib/errors.js';
import { ExitCode } from '../src/lib/exit-codes.js';

const LIBRARIES = [CUDA_LIBRARY, SHARED_LIBRARY, TENSORRT_LIBRARY];

class InstallError extends CodedError<'TILE_ERR_PROVIDER_CUDA_PACKAGE'> {
  constructor(message: string) {
    super('TILE_ERR_PROVIDER_CUDA_PACKAGE', message);
  }
}

/** Every file under `dir` whose name is one of the libraries, by name. */
function findLibraries(dir: string): Map<string, string> {
  const found = new Map<string, string>();
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (LIBRARIES.includes(entry.name) && !found.has(entry.name)) found.set(entry.name, path);
    }
  };
  walk(dir);
  return found;
}

/** The version a package file says it is (NuGet .nuspec, wheel METADATA, archive VERSION_NUMBER), or null. */
function packageVersion(dir: string): string | null {
  const files = new Map<string, string>();
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(d, entry.name));
      else if (/\.nuspec$|^METADATA$|^VERSION_NUMBER$/.test(entry.name))
        files.set(entry.name.replace(/.*\.nuspec$/, 'nuspec'), join(d, entry.name));
    }
  };
  walk(dir);
  const read = (name: string) => (files.has(name) ? readFileSync(files.get(name)!, 'utf8') : null);
  const nuspec = read('nuspec');
  if (nuspec) return /<version>\s*([^<\s]+)\s*<\/version>/.exec(nuspec)?.[1] ?? null;
  const metadata = read('METADATA');
  if (metadata) return /^Version:\s*(\S+)/m.exec(metadata)?.[1] ?? null;
  return read('VERSION_NUMBER')?.trim() || null;
}

/** Unpacks `file` into a temporary folder (a folder is used as it is). */
function unpack(file: string): { dir: string; temporary: boolean } {
  if (!existsSync(file)) throw new InstallError(`${file}: no such file`);
  if (statSync(file).isDirectory()) return { dir: file, temporary: false };
  const dir = mkdtempSync(join(tmpdir(), 'cuda-provider-'));
  if (/\.(nupkg|whl|zip)$/i.test(file)) {
    try {
      // Only what is needed: the libraries and the version metadata.
      const zip = new AdmZip(file);
      for (const entry of zip.getEntries()) {
        const name = basename(entry.entryName);
        if (LIBRARIES.includes(name) || /\.nuspec$|^METADATA$/.test(name)) zip.extractEntryTo(entry, dir, true, true);
      }
    } catch (err) {
      throw new InstallError(`${file}: cannot read it as a zip archive (${(err as Error).message})`);
    }
  } else if (/\.(tgz|tar\.gz)$/i.test(file)) {
    try {
      execFileSync('tar', ['-xzf', file, '-C', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      throw new InstallError(`${file}: tar could not unpack it (${(err as Error).message.split('\n')[0]})`);
    }
  } else {
    throw new InstallError(`${file}: expected a .nupkg, .whl, .tgz or a folder`);
  }
  return { dir, temporary: true };
}

export function install(file: string, dest = runtimeDir()): string[] {
  const expected = bundledVersion();
  const { dir, temporary } = unpack(file);
  try {
    const found = findLibraries(dir);
    const missing = [CUDA_LIBRARY, SHARED_LIBRARY].filter((name) => !found.has(name));
    if (missing.length) throw new InstallError(`${file}: has no ${missing.join(' nor ')}`);
    const declared = packageVersion(dir);
    if (declared && declared !== expected)
      throw new InstallError(
        `${file}: is ONNX Runtime ${declared}, expected ${expected} (the bundled libonnxruntime's version); nothing installed`,
      );
    // The libraries side by side, as they will be loaded, for the version check.
    const staged = mkdtempSync(join(tmpdir(), 'cuda-staged-'));
    try {
      for (const [name, path] of found) copyFileSync(path, join(staged, name));
      const check = checkCudaProvider(staged, expected);
      if (check.state !== 'ok')
        throw new InstallError(
          `${file}: ${check.state === 'problem' ? check.problem.replace(staged, 'the package') : 'no libraries'}; nothing installed`,
        );
      const record: InstallRecord = {
        version: expected,
        source: basename(file),
        installed_at: new Date().toISOString(),
        files: {},
      };
      for (const name of found.keys()) {
        copyFileSync(join(staged, name), join(dest, name));
        const s = statSync(join(dest, name));
        record.files[name] = { size: s.size, mtime_ms: s.mtimeMs };
      }
      writeFileSync(join(dest, INSTALL_RECORD), `${JSON.stringify(record, null, 2)}\n`);
      return [...found.keys()].map((name) => join(dest, name));
    } finally {
      rmSync(staged, { recursive: true, force: true });
    }
  } finally {
    if (temporary) rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { dest: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help || positionals.length !== 1) {
    process.stdout.write(
      'Usage: npm run cuda:install -- FILE [--dest DIR]\n  FILE: Microsoft.ML.OnnxRuntime.Gpu.Linux.<version>.nupkg, an onnxruntime-gpu wheel, onnxruntime-linux-x64-gpu-<version>.tgz, or a folder\n',
    );
    process.exit(values.help ? ExitCode.OK : ExitCode.CONFIG);
  }
  try {
    const files = install(positionals[0], values.dest);
    process.stdout.write(
      `installed ONNX Runtime ${bundledVersion()} CUDA provider: ${files.join(', ')}\nnext: npm start -- --check-config\n`,
    );
  } catch (err) {
    if (!(err instanceof InstallError)) throw err;
    process.stderr.write(`cuda:install: ${errorLine(err)}\n`);
    process.exit(ExitCode.CONFIG);
  }
}
