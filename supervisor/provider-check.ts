// --check-config's execution provider section: whether the CUDA provider libraries beside the
// bundled libonnxruntime are there and from the same ONNX Runtime version, and the Vulkan devices
// webgpu would choose from. Problems are those that would fail or crash a worker.
import type { ServiceConfig } from '../src/config/config.js';
import type { CodedError } from '../src/lib/errors.js';
import { bundledVersion, checkCudaProvider, runtimeDir } from '../src/gpu/cuda-provider.js';
import { deviceLabel, vulkanDevices } from '../src/gpu/vulkan.js';

type Problem = Pick<CodedError, 'code' | 'message'>;
const cudaProblem = (message: string): Problem => ({ code: 'TILE_ERR_PROVIDER_CUDA_LIBRARIES', message });

export function describeProviders(config: ServiceConfig, dir = runtimeDir()): { lines: string[]; problems: Problem[] } {
  const lines = ['execution providers:'];
  const problems: Problem[] = [];
  const version = bundledVersion(dir);
  const mayUse = (provider: string) =>
    config.models.filter((m) => m.provider === 'auto' || m.provider.includes(provider as never));
  const cuda = checkCudaProvider(dir, version);
  if (cuda.state === 'ok') lines.push(`  cuda: provider libraries for ONNX Runtime ${version} in ${dir}`);
  else if (cuda.state === 'absent')
    lines.push(
      `  cuda: provider libraries not installed beside libonnxruntime ${version} (${dir}; npm run cuda:install)`,
    );
  else if (mayUse('cuda').length) problems.push(cudaProblem(`cuda: ${cuda.problem}`));
  else lines.push(`  cuda: ${cuda.problem} (no model uses cuda)`);
  for (const m of config.models) {
    if (cuda.state === 'absent' && Array.isArray(m.provider) && m.provider.every((p) => p === 'cuda'))
      problems.push(
        cudaProblem(
          `model ${m.name}: provider ["cuda"], but the CUDA provider libraries are not installed (npm run cuda:install)`,
        ),
      );
  }
  try {
    const devices = vulkanDevices();
    lines.push(
      `  webgpu: ${devices === null ? 'no Vulkan loader (libvulkan.so.1)' : devices.length ? `Vulkan devices: ${devices.map(deviceLabel).join('; ')}` : 'no Vulkan device'}`,
    );
  } catch (err) {
    lines.push(`  webgpu: the Vulkan probe failed: ${(err as Error).message}`);
  }
  lines.push('  cpu: always');
  return { lines, problems };
}
