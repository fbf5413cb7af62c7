// Which execution provider a worker's session runs on. "auto" tries cuda, then webgpu, then cpu,
// and uses a GPU provider only on the GPU this instance is pinned to and never on a software
// rasterizer; an explicit list tries its providers in order and may use a software Vulkan device
// (tests do). Every provider passed over is kept with the reason, for /api/models, /diagnostics
// and the log.
import ort from '../lib/onnxruntime.js';
import { CodedError } from '../lib/errors.js';
import type { ProviderName } from '../config/config.js';
import type { SkippedProvider } from '../ipc/protocol.js';
import { bundledVersion, CUDA_LIBRARY, installRecordProblem, runtimeDir } from '../gpu/cuda-provider.js';
import { deviceLabel, vulkanDevices, type VulkanDevice } from '../gpu/vulkan.js';
import { isMigDevice } from '../gpu/nvidia-smi.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export interface ProviderTarget {
  /** The GPU id this instance is pinned to, and its identity when nvidia-smi listed it. */
  gpu: string | null;
  gpuPci: string | null;
  gpuUuid: string | null;
}

export interface ProviderChoice {
  provider: ProviderName;
  skipped: SkippedProvider[];
  /** The Vulkan device webgpu runs on, when it is the only candidate Dawn can take. */
  adapter: VulkanDevice | null;
}

/** No provider of the configured list can run this model: the model is failed, not retried. */
export class NoProviderError extends CodedError<'TILE_ERR_MODEL_NO_PROVIDER'> {
  override name = 'NoProviderError';
  constructor(message: string) {
    super('TILE_ERR_MODEL_NO_PROVIDER', message);
  }
}

const NO_GPU = 'no GPU assigned to this instance (gpus is [] or nvidia-smi found none)';
const firstLine = (err: unknown) => (err as Error).message.split('\n')[0].trim();

/** Why cuda cannot be tried here, or null. */
function cudaPrecheck(target: ProviderTarget): string | null {
  if (target.gpu === null) return NO_GPU;
  const dir = runtimeDir();
  if (!existsSync(join(dir, CUDA_LIBRARY)))
    return 'the CUDA provider libraries are not installed (README "GPU hosts": npm run cuda:install)';
  try {
    return installRecordProblem(dir, bundledVersion(dir));
  } catch (err) {
    return firstLine(err);
  }
}

/** The Vulkan device Dawn will take, or why webgpu cannot be tried. */
function webgpuPrecheck(target: ProviderTarget, auto: boolean): { adapter: VulkanDevice | null } | { skip: string } {
  if (auto && target.gpu === null) return { skip: NO_GPU };
  // MIG supports no graphics APIs (OpenGL, Vulkan: NVIDIA's MIG user guide); a Vulkan device
  // listed would be the whole GPU, not this slice.
  if (target.gpu !== null && isMigDevice(target.gpu))
    return { skip: `${target.gpu} is a MIG device, which Vulkan (and so webgpu) cannot use: only cuda runs on it` };
  let devices: VulkanDevice[] | null;
  try {
    devices = vulkanDevices();
  } catch (err) {
    return { skip: `the Vulkan probe failed: ${firstLine(err)}` };
  }
  if (devices === null) return { skip: 'no Vulkan loader (libvulkan.so.1; Debian: libvulkan1)' };
  if (devices.length === 0) return { skip: 'no Vulkan device (no Vulkan driver installed)' };
  const list = devices.map(deviceLabel).join('; ');
  const hardware = devices.filter((d) => !d.software);
  if (target.gpu !== null && (target.gpuPci || target.gpuUuid)) {
    const mine = hardware.find(
      (d) => (target.gpuPci && d.pci === target.gpuPci) || d.uuid.toLowerCase() === target.gpuUuid?.toLowerCase(),
    );
    if (!mine)
      return { skip: `GPU ${target.gpu} (pci ${target.gpuPci ?? '?'}) is not among the Vulkan devices: ${list}` };
    if (hardware.length > 1)
      return {
        skip: `Vulkan shows ${hardware.length} GPUs (${hardware.map(deviceLabel).join('; ')}) to a worker pinned to GPU ${target.gpu}, so Dawn could take another: pinning needs Mesa's device-select layer (Debian: mesa-vulkan-drivers)`,
      };
    return { adapter: mine };
  }
  if (hardware.length > 1 && target.gpu !== null)
    return {
      skip: `Vulkan shows ${hardware.length} GPUs (${list}) and GPU ${target.gpu} is not known to nvidia-smi, so it cannot be pinned`,
    };
  if (hardware.length === 0 && auto)
    return {
      skip: `only software Vulkan devices (${list}); "auto" never uses them (list "webgpu" in provider to allow one)`,
    };
  const candidates = hardware.length ? hardware : devices;
  return { adapter: candidates.length === 1 ? candidates[0] : null };
}

/**
 * Opens the model on the first provider of `setting` that works. Throws NoProviderError naming
 * every provider and why it was passed over when none does, and the cpu provider's own error
 * when the graph cannot load there.
 */
export async function openSession(
  modelPath: string,
  options: ort.InferenceSession.SessionOptions,
  setting: 'auto' | ProviderName[],
  target: ProviderTarget,
): Promise<{ session: ort.InferenceSession; choice: ProviderChoice }> {
  const auto = setting === 'auto';
  const order: ProviderName[] = auto ? ['cuda', 'webgpu', 'cpu'] : setting;
  const skipped: SkippedProvider[] = [];
  for (const provider of order) {
    let adapter: VulkanDevice | null = null;
    if (provider === 'cuda') {
      const skip = cudaPrecheck(target);
      if (skip) {
        skipped.push({ provider, reason: skip });
        continue;
      }
    } else if (provider === 'webgpu') {
      const check = webgpuPrecheck(target, auto);
      if ('skip' in check) {
        skipped.push({ provider, reason: check.skip });
        continue;
      }
      adapter = check.adapter;
    }
    try {
      const session = await ort.InferenceSession.create(modelPath, { ...options, executionProviders: [provider] });
      return { session, choice: { provider, skipped, adapter } };
    } catch (err) {
      // The cpu provider is always there: what it cannot open is the graph itself (corrupt, an
      // unsupported operator), a load failure of the package, not of a provider.
      if (provider === 'cpu') throw err;
      skipped.push({ provider, reason: firstLine(err) });
    }
  }
  throw new NoProviderError(
    `no usable execution provider in ${JSON.stringify(setting)}: ${skipped.map((s) => `${s.provider}: ${s.reason}`).join('; ')}`,
  );
}
