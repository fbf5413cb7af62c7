// The Vulkan devices this process can see, as the Vulkan loader (libvulkan.so.1) enumerates them:
// the same devices, in the same environment, that Dawn (ONNX Runtime's WebGPU provider, linked
// into libonnxruntime) chooses its adapter from. onnxruntime-node does not say which adapter Dawn
// took, so this probe is how the worker tells a real GPU from a software rasterizer (lavapipe,
// SwiftShader) and checks that its pinning left only its own GPU visible. Called through koffi;
// a host without the loader simply has no Vulkan device.
import koffi, { type LibraryHandle, type TypeObject } from 'koffi';

export interface VulkanDevice {
  name: string;
  /** discrete, integrated, virtual, cpu or other (VkPhysicalDeviceType). */
  type: 'other' | 'integrated' | 'discrete' | 'virtual' | 'cpu';
  vendor_id: string;
  device_id: string;
  driver: string;
  /** "0000:3b:00.0" when the driver reports it (VK_EXT_pci_bus_info). */
  pci: string | null;
  /** deviceUUID as nvidia-smi writes GPU UUIDs ("GPU-xxxxxxxx-xxxx-…"). */
  uuid: string;
  /** A CPU implementation: never chosen by "auto". */
  software: boolean;
}

const TYPES = ['other', 'integrated', 'discrete', 'virtual', 'cpu'] as const;
/** Software rasterizers by name too, for an implementation that reports another device type. */
const SOFTWARE_NAMES = /llvmpipe|lavapipe|swiftshader|softpipe/i;

const API_1_2 = (1 << 22) | (2 << 12);
const S = {
  INSTANCE_CREATE_INFO: 1,
  PROPERTIES_2: 1000059001,
  ID: 1000071004,
  DRIVER: 1000196000,
  PCI_BUS_INFO: 1000212000,
} as const;

interface Api {
  createInstance: (info: unknown, alloc: null, out: unknown[]) => number;
  destroyInstance: (instance: unknown, alloc: null) => void;
  enumerateDevices: (instance: unknown, count: number[], devices: unknown) => number;
  enumerateExtensions: (device: unknown, layer: null, count: number[], props: unknown) => number;
  properties2: (device: unknown, props: unknown) => void;
  types: Record<'Properties2' | 'Id' | 'Driver' | 'Pci' | 'Extension', TypeObject>;
}

let api: Api | null | undefined;

function load(): Api | null {
  if (api !== undefined) return api;
  let lib: LibraryHandle;
  try {
    lib = koffi.load('libvulkan.so.1');
  } catch {
    return (api = null);
  }
  const name = (n: number) => koffi.array('char', n, 'String');
  const bytes = (n: number) => koffi.array('uint8', n, 'Array');
  const AppInfo = koffi.struct('VkApplicationInfo', {
    sType: 'uint32',
    pNext: 'void *',
    pApplicationName: 'const char *',
    applicationVersion: 'uint32',
    pEngineName: 'const char *',
    engineVersion: 'uint32',
    apiVersion: 'uint32',
  });
  koffi.struct('VkInstanceCreateInfo', {
    sType: 'uint32',
    pNext: 'void *',
    flags: 'uint32',
    pApplicationInfo: koffi.pointer(AppInfo),
    enabledLayerCount: 'uint32',
    ppEnabledLayerNames: 'void *',
    enabledExtensionCount: 'uint32',
    ppEnabledExtensionNames: 'void *',
  });
  // VkPhysicalDeviceLimits (504 bytes, 8-aligned) and the sparse properties are never read.
  const Properties = koffi.struct('VkPhysicalDeviceProperties', {
    apiVersion: 'uint32',
    driverVersion: 'uint32',
    vendorID: 'uint32',
    deviceID: 'uint32',
    deviceType: 'uint32',
    deviceName: name(256),
    pipelineCacheUUID: bytes(16),
    limits: koffi.array('uint64', 63),
    sparse: koffi.array('uint32', 5),
  });
  api = {
    createInstance: lib.func('int32 vkCreateInstance(VkInstanceCreateInfo *info, void *alloc, _Out_ void **instance)'),
    destroyInstance: lib.func('void vkDestroyInstance(void *instance, void *alloc)'),
    enumerateDevices: lib.func(
      'int32 vkEnumeratePhysicalDevices(void *instance, _Inout_ uint32 *count, void *devices)',
    ),
    enumerateExtensions: lib.func(
      'int32 vkEnumerateDeviceExtensionProperties(void *device, const char *layer, _Inout_ uint32 *count, void *props)',
    ),
    properties2: lib.func('void vkGetPhysicalDeviceProperties2(void *device, void *props)'),
    types: {
      Properties2: koffi.struct('VkPhysicalDeviceProperties2', {
        sType: 'uint32',
        pNext: 'void *',
        properties: Properties,
      }),
      Id: koffi.struct('VkPhysicalDeviceIDProperties', {
        sType: 'uint32',
        pNext: 'void *',
        deviceUUID: bytes(16),
        driverUUID: bytes(16),
        deviceLUID: bytes(8),
        deviceNodeMask: 'uint32',
        deviceLUIDValid: 'uint32',
      }),
      Driver: koffi.struct('VkPhysicalDeviceDriverProperties', {
        sType: 'uint32',
        pNext: 'void *',
        driverID: 'uint32',
        driverName: name(256),
        driverInfo: name(256),
        conformance: bytes(4),
      }),
      Pci: koffi.struct('VkPhysicalDevicePCIBusInfoPropertiesEXT', {
        sType: 'uint32',
        pNext: 'void *',
        pciDomain: 'uint32',
        pciBus: 'uint32',
        pciDevice: 'uint32',
        pciFunction: 'uint32',
      }),
      Extension: koffi.struct('VkExtensionProperties', { extensionName: name(256), specVersion: 'uint32' }),
    },
  };
  return api;
}

const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');

const uuidText = (b: number[]) => {
  const h = b.map((x) => hex(x, 2)).join('');
  return `GPU-${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
};

/** One device's properties, with its PCI address when the driver has VK_EXT_pci_bus_info. */
function describe(vk: Api, device: unknown): VulkanDevice {
  const { types } = vk;
  const count = [0];
  vk.enumerateExtensions(device, null, count, null);
  const extensions = koffi.alloc(types.Extension, Math.max(1, count[0]));
  vk.enumerateExtensions(device, null, count, extensions);
  const names = (koffi.decode(extensions, koffi.array(types.Extension, count[0])) as { extensionName: string }[]).map(
    (e) => e.extensionName,
  );
  const hasPci = names.includes('VK_EXT_pci_bus_info');
  // A chain Properties2 -> ID -> Driver [-> PCI bus info], each in memory of its own.
  const chained = (type: TypeObject, value: Record<string, unknown>) => {
    const ptr = koffi.alloc(type, 1);
    koffi.encode(ptr, type, value);
    return ptr;
  };
  const pci = hasPci ? chained(types.Pci, { sType: S.PCI_BUS_INFO, pNext: null }) : null;
  const driver = chained(types.Driver, { sType: S.DRIVER, pNext: pci });
  const id = chained(types.Id, { sType: S.ID, pNext: driver });
  const props = chained(types.Properties2, { sType: S.PROPERTIES_2, pNext: id });
  try {
    vk.properties2(device, props);
    const p = (
      koffi.decode(props, types.Properties2) as {
        properties: { deviceName: string; deviceType: number; vendorID: number; deviceID: number };
      }
    ).properties;
    const bus = pci ? (koffi.decode(pci, types.Pci) as Record<string, number>) : null;
    const type = TYPES[p.deviceType] ?? 'other';
    return {
      name: p.deviceName,
      type,
      vendor_id: `0x${hex(p.vendorID, 4)}`,
      device_id: `0x${hex(p.deviceID, 4)}`,
      driver: (koffi.decode(driver, types.Driver) as { driverName: string }).driverName,
      pci: bus ? `${hex(bus.pciDomain, 4)}:${hex(bus.pciBus, 2)}:${hex(bus.pciDevice, 2)}.${bus.pciFunction}` : null,
      uuid: uuidText((koffi.decode(id, types.Id) as { deviceUUID: number[] }).deviceUUID),
      software: type === 'cpu' || SOFTWARE_NAMES.test(p.deviceName),
    };
  } finally {
    for (const ptr of [props, id, driver, pci, extensions]) if (ptr) koffi.free(ptr);
  }
}

/** The Vulkan devices visible to this process; null when no Vulkan loader is installed. Throws
 *  when the loader fails (no driver at all is an empty list). */
export function vulkanDevices(): VulkanDevice[] | null {
  const vk = load();
  if (!vk) return null;
  const instance: unknown[] = [null];
  const info = {
    sType: S.INSTANCE_CREATE_INFO,
    pNext: null,
    flags: 0,
    pApplicationInfo: {
      sType: 0,
      pNext: null,
      pApplicationName: 'tile-inference probe',
      applicationVersion: 0,
      pEngineName: null,
      engineVersion: 0,
      apiVersion: API_1_2,
    },
    enabledLayerCount: 0,
    ppEnabledLayerNames: null,
    enabledExtensionCount: 0,
    ppEnabledExtensionNames: null,
  };
  const created = vk.createInstance(info, null, instance);
  // VK_ERROR_INCOMPATIBLE_DRIVER: the loader found no driver.
  if (created === -9) return [];
  if (created !== 0) throw new Error(`vkCreateInstance failed (VkResult ${created})`);
  try {
    const count = [0];
    vk.enumerateDevices(instance[0], count, null);
    const handles = koffi.alloc('void *', Math.max(1, count[0]));
    try {
      vk.enumerateDevices(instance[0], count, handles);
      const devices = koffi.decode(handles, koffi.array('void *', count[0], 'Array')) as unknown[];
      return devices.map((device) => describe(vk, device));
    } finally {
      koffi.free(handles);
    }
  } finally {
    vk.destroyInstance(instance[0], null);
  }
}

/** "llvmpipe (LLVM 15.0.6, 256 bits) (cpu, software)" for messages. */
export const deviceLabel = (d: VulkanDevice) =>
  `${d.name} (${d.type}${d.software ? ', software' : ''}${d.pci ? `, pci ${d.pci}` : ''})`;
