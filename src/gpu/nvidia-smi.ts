// nvidia-smi: the GPUs of the host, for placement (supervisor) and /diagnostics.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

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
