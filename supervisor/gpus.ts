// GPU discovery (nvidia-smi) and the assignment of worker instances to GPUs.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ModelEntry } from './config.js';

const run = promisify(execFile);

export interface GpuInfo {
  index: string;
  name: string;
  memory_total_mib: number;
  memory_used_mib: number;
  utilization_pct: number;
  driver: string;
}

/** GPUs as nvidia-smi lists them; null when nvidia-smi is not installed. Throws when it fails. */
export async function queryGpus(timeoutMs = 2000): Promise<GpuInfo[] | null> {
  let stdout: string;
  try {
    ({ stdout } = await run('nvidia-smi', ['--query-gpu=index,name,memory.total,memory.used,utilization.gpu,driver_version', '--format=csv,noheader,nounits'], { timeout: timeoutMs }));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`nvidia-smi failed: ${(err as Error).message.split('\n')[0]}`);
  }
  return stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [index, name, total, used, util, driver] = line.split(',').map((s) => s.trim());
      return { index, name, memory_total_mib: Number(total), memory_used_mib: Number(used), utilization_pct: Number(util), driver };
    });
}

/**
 * The GPU for every instance of every model, in config order: explicit lists are used
 * round-robin per model; "auto" spreads instances round-robin over the discovered GPUs, across all
 * models; with no GPU the instance runs on CPU (null).
 */
export function assignGpus(models: ModelEntry[], discovered: string[]): Map<string, (string | null)[]> {
  const plan = new Map<string, (string | null)[]>();
  let next = 0;
  for (const model of models) {
    const ids: (string | null)[] = [];
    for (let i = 0; i < model.instances; i++) {
      if (model.gpus !== 'auto') ids.push(model.gpus.length ? model.gpus[i % model.gpus.length] : null);
      else ids.push(discovered.length ? discovered[next++ % discovered.length] : null);
    }
    plan.set(model.name, ids);
  }
  return plan;
}
