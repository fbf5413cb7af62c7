// Pinning a worker process to its GPU, for every execution provider, through its environment at
// fork (nothing else reaches the drivers before they enumerate devices):
// - CUDA: CUDA_VISIBLE_DEVICES. CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER is
//   PCI_BUS_ID, while nvidia-smi (and so the config's GPU ids) numbers them in PCI order. A MIG
//   device is pinned by its UUID there too, and only there (nvidia-smi's GPU rows, whence the
//   PCI address below, are whole GPUs; MIG runs no Vulkan).
// - WebGPU: Dawn requests a high-performance adapter and takes the first device the Vulkan loader
//   lists after sorting by type (discrete, integrated, ..., CPU last); it has no device index and
//   onnxruntime-node passes none. On a host of identical GPUs it would take the same one in every
//   process. Mesa's device-select layer (an implicit Vulkan layer from mesa-vulkan-drivers, which
//   also sits above NVIDIA's driver) narrows the list: DRI_PRIME=pci-DDDD_BB_DD_F picks the device
//   at that PCI address and MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1 hides the others. The
//   worker checks the result with its own Vulkan probe (vulkan.ts) before it uses webgpu.
import type { GpuInfo } from './nvidia-smi.js';

/** "0000:3b:00.0", the form Vulkan's PCI bus info gives, from nvidia-smi's "00000000:3B:00.0". */
export function pciAddress(busId: string): string | null {
  const m = /^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$/i.exec(busId.trim());
  return m ? `${m[1].slice(-4)}:${m[2]}:${m[3]}.${m[4]}`.toLowerCase() : null;
}

/** The environment a worker pinned to `gpu` (null: no GPU) is forked with. */
export function pinningEnv(gpu: string | null, info: GpuInfo | undefined): Record<string, string> {
  // Empty hides every GPU from CUDA in a CPU worker.
  const env: Record<string, string> = { CUDA_VISIBLE_DEVICES: gpu ?? '', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' };
  const pci = info ? pciAddress(info.pci_bus_id) : null;
  if (pci) {
    env.DRI_PRIME = `pci-${pci.replace(/[:.]/g, '_')}`;
    env.MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE = '1';
  }
  return env;
}
