// GPU discovery for "auto" placement, and the assignment of worker instances to GPUs.
import type { Logger } from 'pino';
import { queryGpus, type GpuInfo } from '../src/gpu/nvidia-smi.js';
import type { ModelEntry, ServiceConfig } from '../src/config/config.js';

/** The host's GPUs, for "auto" placement and for pinning listed GPUs; none (CPU) when
 *  nvidia-smi is missing or fails, or when no model is given a GPU. */
export async function discoverGpus(config: ServiceConfig, logger: Logger): Promise<GpuInfo[]> {
  if (!config.models.some((m) => m.gpus === 'auto' || m.gpus.length > 0)) return [];
  try {
    const gpus = (await queryGpus()) ?? [];
    logger.info(
      { gpus: gpus.map((g) => `${g.index}: ${g.name} (${g.pci_bus_id})`) },
      gpus.length ? 'GPUs found' : 'no GPU found; models run on CPU',
    );
    return gpus;
  } catch (err) {
    logger.warn({ err }, 'GPU discovery failed; models run on CPU');
    return [];
  }
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
