// The probes behind /diagnostics. Each runs isolated with a timeout: one that throws or hangs
// becomes {"error": ...} in its own section and the others still answer.
import { readFileSync, statfsSync } from 'node:fs';
import { open } from 'node:fs/promises';
import os from 'node:os';
import pidusage from 'pidusage';
import ort from 'onnxruntime-node';
import { queryGpus } from '../../supervisor/gpus.js';
import type { Supervisor } from '../../supervisor/supervisor.js';
import { SERVICE_PACKAGE } from '../version.js';

const ROOT = new URL('../../../', import.meta.url);

export async function runProbe(probe: () => unknown, timeoutMs: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`probe timed out after ${timeoutMs} ms`)), timeoutMs)));
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

export function models(supervisor: Supervisor) {
  return Object.fromEntries(
    [...supervisor.pools.values()].map((pool) => [
      pool.name,
      {
        state: pool.state,
        instances: pool.workers.length,
        ready_instances: pool.workers.filter((w) => w.state === 'ready').length,
        outstanding: pool.outstanding,
        sha256: pool.info?.sha256 ?? null,
        trained: pool.info?.manifest.provenance.trained ?? null,
      },
    ]),
  );
}

/** Each worker: the supervisor's view, pidusage's CPU and memory, and its own IPC probe. */
export async function workers(supervisor: Supervisor, probeTimeoutMs: number) {
  return Promise.all(
    supervisor.workers.map(async (w) => {
      const snapshot = w.snapshot();
      const usage = snapshot.pid
        ? await pidusage(snapshot.pid).then(
            (u) => ({ cpu_pct: u.cpu, memory_bytes: u.memory }),
            (err: Error) => ({ error: err.message }),
          )
        : null;
      return { ...snapshot, usage, probe: await w.probe(probeTimeoutMs) };
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
