// GPU discovery for "auto" placement, and the assignment of worker instances to GPUs.
import type { Logger } from 'pino';
import { isMigDevice, queryGpus, queryMigDevices, type GpuInfo, type MigDevice } from '../src/gpu/nvidia-smi.js';
import { ConfigError, settingSource, type ModelEntry, type ServiceConfig } from '../src/config/config.js';

/** The host GPU a configured id (an index or a UUID, as the schema takes) names, if any; none
 *  for a MIG device, which is pinned through CUDA_VISIBLE_DEVICES alone (Vulkan cannot use one). */
export const hostGpu = (gpus: GpuInfo[], id: string | null): GpuInfo | undefined =>
  id === null ? undefined : gpus.find((g) => g.index === id || g.uuid.toLowerCase() === id.toLowerCase());

/** Whether a model lists a MIG device, so that `nvidia-smi -L` must be asked for them. */
const listsMig = (config: ServiceConfig): boolean =>
  config.models.some((m) => m.gpus !== 'auto' && m.gpus.some(isMigDevice));

/** Each listed GPU id that names none of `gpus` (the host's, by nvidia-smi), or, for a MIG
 *  device, none of `mig` (null: MIG devices unknown, not checked): its workers would get a
 *  CUDA_VISIBLE_DEVICES that shows them no GPU, and run on the CPU or fail. */
export function unknownGpus(
  config: ServiceConfig,
  gpus: GpuInfo[],
  env: NodeJS.ProcessEnv = process.env,
  mig: MigDevice[] | null = [],
): ConfigError[] {
  const listed = (ids: string[]) => (ids.length ? ids.join(', ') : 'none');
  const problem = (id: string) =>
    isMigDevice(id)
      ? mig === null || mig.some((d) => d.uuid.toLowerCase() === id.toLowerCase())
        ? null
        : `not a MIG device of this host (nvidia-smi -L lists ${listed(mig.map((d) => `${d.uuid} on GPU ${d.gpu}`))}), expected one of their UUIDs`
      : hostGpu(gpus, id)
        ? null
        : `not a GPU of this host (nvidia-smi lists ${listed(gpus.map((g) => g.index))}), expected one of their indices or UUIDs`;
  return config.models.flatMap((model, m) =>
    model.gpus === 'auto'
      ? []
      : model.gpus.flatMap((id, i) => {
          const why = problem(id);
          return why
            ? [
                new ConfigError(
                  'TILE_ERR_CONFIG_GPU',
                  `${settingSource(`models[${m}].gpus[${i}]`, env)} is ${JSON.stringify(id)}, ${why}`,
                ),
              ]
            : [];
        }),
  );
}

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
    // Served anyway (a GPU may be back after a reset), but said: its workers see no GPU.
    const mig = listsMig(config)
      ? await queryMigDevices().then(
          (list) => list ?? [],
          (err) => {
            logger.warn({ err }, 'MIG devices not listed (nvidia-smi -L); those configured are not checked');
            return null;
          },
        )
      : [];
    for (const err of unknownGpus(config, gpus, process.env, mig)) logger.warn({ errorCode: err.code }, err.message);
    return gpus;
  } catch (err) {
    logger.warn({ err }, 'GPU discovery failed; models run on CPU');
    return [];
  }
}

/** --check-config's GPU section: the GPU ids models list, checked against nvidia-smi's GPUs
 *  where it runs (and MIG devices against `nvidia-smi -L`, asked only when one is listed);
 *  without it they cannot be checked, and the line says so. */
export async function checkGpus(
  config: ServiceConfig,
  env: NodeJS.ProcessEnv = process.env,
  query: () => Promise<GpuInfo[] | null> = () => queryGpus(),
  queryMig: () => Promise<MigDevice[] | null> = () => queryMigDevices(),
): Promise<{ lines: string[]; problems: ConfigError[] }> {
  const listed = config.models.filter((m) => m.gpus !== 'auto' && m.gpus.length);
  if (!listed.length) return { lines: [], problems: [] };
  const names = listed.map((m) => `${m.name} ${JSON.stringify(m.gpus)}`).join(', ');
  let gpus: GpuInfo[] | null;
  let mig: MigDevice[] | null = [];
  try {
    gpus = await query();
    if (gpus !== null && listsMig(config)) mig = await queryMig();
  } catch (err) {
    return { lines: [`GPUs: ${names} not checked: ${(err as Error).message}`], problems: [] };
  }
  if (gpus === null || mig === null)
    return { lines: [`GPUs: ${names} not checked: nvidia-smi is not installed`], problems: [] };
  const problems = unknownGpus(config, gpus, env, mig);
  return { lines: problems.length ? [] : [`GPUs: ${names} among those nvidia-smi lists`], problems };
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
