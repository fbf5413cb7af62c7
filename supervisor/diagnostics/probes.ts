// The probes behind /diagnostics. Each runs isolated with a timeout: one that throws or hangs
// becomes {"error": ...} in its own section and the others still answer.
import { readFileSync, statfsSync } from 'node:fs';
import { open } from 'node:fs/promises';
import os from 'node:os';
import ort from '../../src/lib/onnxruntime.js';
import { queryGpus } from '../../src/gpu/nvidia-smi.js';
import { SERVICE_PACKAGE } from '../../src/lib/version.js';

const ROOT = new URL('../../../', import.meta.url);

export async function runProbe(probe: () => unknown, timeoutMs: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`probe timed out after ${timeoutMs} ms`)), timeoutMs)),
  );
  try {
    return await Promise.race([Promise.resolve().then(probe), timeout]);
  } catch (err) {
    return { error: (err as Error).message };
  } finally {
    clearTimeout(timer);
  }
}

export function versions() {
  const installed = (name: string) => {
    try {
      return JSON.parse(readFileSync(new URL(`node_modules/${name}/package.json`, ROOT), 'utf8')).version as string;
    } catch {
      return 'not installed';
    }
  };
  return {
    service: SERVICE_PACKAGE.version,
    node: process.versions.node,
    onnxruntime: ort.env.versions.node ?? installed('onnxruntime-node'),
    dependencies: Object.fromEntries(Object.keys(SERVICE_PACKAGE.dependencies).map((name) => [name, installed(name)])),
  };
}

export function host() {
  const cpus = os.cpus();
  return {
    os: os.type(),
    platform: os.platform(),
    arch: os.arch(),
    kernel: os.release(),
    cpu_model: cpus[0]?.model ?? 'unknown',
    cpu_count: os.availableParallelism(),
    memory_total_bytes: os.totalmem(),
    memory_free_bytes: os.freemem(),
    uptime_s: Math.round(os.uptime()),
    load_average: os.loadavg(),
  };
}

export async function gpus() {
  const list = await queryGpus();
  return list === null || list.length === 0 ? 'none' : list;
}

export function disk(folders: Record<string, string>) {
  return Object.fromEntries(
    Object.entries(folders).map(([label, path]) => {
      try {
        const s = statfsSync(path);
        return [label, { path, free_bytes: s.bavail * s.bsize, total_bytes: s.blocks * s.bsize }];
      } catch (err) {
        return [label, { path, error: (err as Error).message }];
      }
    }),
  );
}

/** The last `lines` lines of a file, reading only its end. */
export async function tail(file: string | null, lines = 100): Promise<string[]> {
  if (!file) return [];
  const handle = await open(file, 'r');
  try {
    const { size } = await handle.stat();
    const length = Math.min(size, 256 * 1024);
    const buffer = Buffer.alloc(length);
    await handle.read(buffer, 0, length, size - length);
    return buffer.toString('utf8').split('\n').filter(Boolean).slice(-lines);
  } finally {
    await handle.close();
  }
}
