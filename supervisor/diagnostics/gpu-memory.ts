// GPU memory per worker process, from nvidia-smi (--query-compute-apps), for /diagnostics and
// /metrics. Without nvidia-smi there is nothing to report, and nothing is reported.
import { Gauge, Registry } from 'prom-client';
import { queryGpuMemory } from '../../src/gpu/nvidia-smi.js';

export interface GpuWorker {
  model: string;
  instance: number;
  pid: number | null;
}

/** MiB per pid; null without nvidia-smi, when it fails, or after `timeoutMs` (a hung nvidia-smi
 *  killed at its timeout may still hold its output pipe open through a child). */
export function gpuMemory(timeoutMs = 2000): Promise<Map<number, number> | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), timeoutMs)));
  return Promise.race([queryGpuMemory(timeoutMs).catch(() => null), late]).finally(() => clearTimeout(timer));
}

/** A registry with worker_gpu_memory_bytes{model,instance}, read at each scrape; the supervisor
 *  adds it to the fronts' aggregated metrics. */
export function gpuMemoryRegistry(workers: () => GpuWorker[]): Registry {
  const registry = new Registry();
  new Gauge({
    name: 'worker_gpu_memory_bytes',
    help: 'GPU memory each worker process holds (nvidia-smi; absent without it)',
    labelNames: ['model', 'instance'],
    registers: [registry],
    async collect() {
      this.reset();
      const used = await gpuMemory();
      if (!used) return;
      for (const w of workers())
        if (w.pid !== null && used.has(w.pid))
          this.set({ model: w.model, instance: String(w.instance) }, used.get(w.pid)! * 1024 * 1024);
    },
  });
  return registry;
}
