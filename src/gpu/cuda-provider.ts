// ONNX Runtime's CUDA execution provider, which onnxruntime-node does not ship: two shared
// libraries that ONNX Runtime loads only from the folder of its own libonnxruntime.so.1
// (GetRuntimePath()). They come from Microsoft.ML.OnnxRuntime.Gpu.Linux (the NuGet package
// onnxruntime-node's install script downloads), an onnxruntime-gpu wheel, or the
// onnxruntime-linux-x64-gpu release archive, and they must be built from the same ONNX Runtime
// version as the bundled library: a provider from another release can crash the process that
// loads it. Here: where they go, and whether what is there matches.
import { closeSync, existsSync, openSync, readSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { readHead } from '../lib/read-head.js';

export const CUDA_LIBRARY = 'libonnxruntime_providers_cuda.so';
export const SHARED_LIBRARY = 'libonnxruntime_providers_shared.so';
/** Optional, loaded only for the TensorRT provider. */
export const TENSORRT_LIBRARY = 'libonnxruntime_providers_tensorrt.so';
/** Written by `npm run cuda:install` beside the libraries: where they came from. */
export const INSTALL_RECORD = 'tile-inference-cuda-provider.json';

export interface InstallRecord {
  version: string;
  source: string;
  installed_at: string;
  files: Record<string, { size: number; mtime_ms: number }>;
}

/** Where ONNX Runtime looks for provider libraries: the folder of the bundled libonnxruntime. */
export function runtimeDir(): string {
  const pkg = createRequire(import.meta.url).resolve('onnxruntime-node/package.json');
  return join(dirname(pkg), 'bin', 'napi-v6', process.platform, process.arch);
}

/** A NUL-terminated "x.y.z" string at `at` in `buf`, or null. */
function versionAt(buf: Buffer, at: number): string | null {
  const end = buf.indexOf(0, at);
  if (end < 0 || end - at > 12) return null;
  const text = buf.toString('latin1', at, end);
  return /^\d+\.\d+\.\d+$/.test(text) ? text : null;
}

/** Every NUL-delimited "1.x.y" string in a file (ONNX Runtime's ORT_VERSION literal is one: the
 *  CUDA provider returns it from its EP factory's GetVersion), read in chunks. */
export function versionStrings(file: string): Set<string> {
  const found = new Set<string>();
  const fd = openSync(file, 'r');
  const chunk = Buffer.alloc(16 * 1024 * 1024);
  const overlap = 16;
  try {
    let position = 0;
    let carry = 0;
    for (;;) {
      const read = readSync(fd, chunk, carry, chunk.length - carry, position);
      if (read === 0) break;
      position += read;
      const view = chunk.subarray(0, carry + read);
      for (let at = view.indexOf('\u00001.', 0, 'latin1'); at >= 0; at = view.indexOf('\u00001.', at + 1, 'latin1')) {
        const version = versionAt(view, at + 1);
        if (version) found.add(version);
      }
      carry = Math.min(overlap, view.length);
      view.copyWithin(0, view.length - carry);
    }
  } finally {
    closeSync(fd);
  }
  return found;
}

/** The bundled libonnxruntime's version, from its ELF symbol version ("VERS_1.30.0"). */
export function bundledVersion(dir = runtimeDir()): string {
  const match = /VERS_(\d+\.\d+\.\d+)\0/.exec(
    readHead(join(dir, 'libonnxruntime.so.1'), 1024 * 1024).toString('latin1'),
  );
  if (!match) throw new Error('libonnxruntime.so.1 carries no VERS_x.y.z symbol version');
  return match[1];
}

/** Why a file is not a shared library this process can load, or null. */
function elfProblem(file: string): string | null {
  const head = readHead(file, 20);
  if (head.length < 20 || head.readUInt32BE(0) !== 0x7f454c46) return 'is not an ELF shared library';
  const machine = head.readUInt16LE(18);
  const expected = { x64: 0x3e, arm64: 0xb7 }[process.arch as 'x64' | 'arm64'];
  if (head[4] !== 2 || machine !== expected)
    return `is an ELF file for another machine (class ${head[4]}, e_machine 0x${machine.toString(16)}), expected ${process.arch}`;
  return null;
}

export type CudaProviderCheck =
  | { state: 'absent' }
  | { state: 'ok'; version: string }
  | { state: 'problem'; problem: string };

/**
 * What the CUDA provider libraries in `dir` are: absent, matching `expected` (the bundled
 * libonnxruntime's version, found as a version string in the CUDA library), or a problem naming
 * the file and what was found. Reads the whole CUDA library (a few hundred MB): for
 * --check-config and the installer, not for every worker start (see installRecordProblem).
 */
export function checkCudaProvider(dir: string, expected: string): CudaProviderCheck {
  const cuda = join(dir, CUDA_LIBRARY);
  const present = [CUDA_LIBRARY, SHARED_LIBRARY].filter((name) => existsSync(join(dir, name)));
  if (present.length === 0) return { state: 'absent' };
  if (present.length === 1)
    return {
      state: 'problem',
      problem: `${dir}: ${present[0]} is there but not ${present[0] === CUDA_LIBRARY ? SHARED_LIBRARY : CUDA_LIBRARY}; both come from the same package`,
    };
  for (const name of [CUDA_LIBRARY, SHARED_LIBRARY]) {
    const problem = elfProblem(join(dir, name));
    if (problem) return { state: 'problem', problem: `${join(dir, name)} ${problem}` };
  }
  const versions = versionStrings(cuda);
  if (versions.has(expected)) return { state: 'ok', version: expected };
  if (versions.size === 0)
    return {
      state: 'problem',
      problem: `${cuda} carries no ONNX Runtime version string, so it cannot be checked against the bundled ${expected}; install it with npm run cuda:install`,
    };
  return {
    state: 'problem',
    problem: `${cuda} is from another ONNX Runtime release: it carries version ${[...versions].sort().join(', ')}, not ${expected} (the bundled libonnxruntime's)`,
  };
}

/** The cheap check a worker makes before loading the CUDA provider: when `npm run cuda:install`
 *  recorded the libraries, their version and that they did not change since. Null when fine or
 *  not recorded (libraries from onnxruntime-node's own install script). */
export function installRecordProblem(dir: string, expected: string): string | null {
  const file = join(dir, INSTALL_RECORD);
  if (!existsSync(file)) return null;
  const record = JSON.parse(readFileSync(file, 'utf8')) as InstallRecord;
  if (record.version !== expected)
    return `${file}: the CUDA provider libraries are ONNX Runtime ${record.version}, expected ${expected}`;
  for (const [name, { size, mtime_ms }] of Object.entries(record.files)) {
    const path = join(dir, name);
    if (!existsSync(path)) return `${path} was installed by npm run cuda:install and is gone`;
    const s = statSync(path);
    if (s.size !== size || Math.round(s.mtimeMs) !== Math.round(mtime_ms))
      return `${path} changed after npm run cuda:install; run it again`;
  }
  return null;
}
