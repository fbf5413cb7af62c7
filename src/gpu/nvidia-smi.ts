// nvidia-smi: the GPUs of the host, for placement (supervisor) and /diagnostics, their MIG
// devices, and the GPU memory each process holds.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface GpuInfo {
  index: string;
  name: string;
  /** "GPU-…", the same identity CUDA and Vulkan (deviceUUID) report. */
  uuid: string;
  /** "00000000:3B:00.0" (domain:bus:device.function). */
  pci_bus_id: string;
  memory_total_mib: number;
  memory_used_mib: number;
  utilization_pct: number;
  driver: string;
}

/** A MIG device (a slice of a GPU in MIG mode) as `nvidia-smi -L` lists it under its GPU; the
 *  query options list whole GPUs only. */
export interface MigDevice {
  /** "MIG-…" (drivers before R470: "MIG-GPU-…/<gi>/<ci>"): what CUDA_VISIBLE_DEVICES takes. */
  uuid: string;
  /** Its GPU's index. */
  gpu: string;
  /** "MIG 1g.10gb Device 0". */
  name: string;
}

/** Whether a configured GPU id names a MIG device (config.ts's forms), which only
 *  `nvidia-smi -L` lists, and on which only CUDA runs. */
export const isMigDevice = (id: string): boolean => id.startsWith('MIG-');

const GPU_FIELDS = 'index,name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,driver_version';

/** stdout of `nvidia-smi args`; null when nvidia-smi is not installed. Throws when it fails. */
async function nvidiaSmi(args: string[], timeoutMs: number): Promise<string | null> {
  try {
    return (await run('nvidia-smi', args, { timeout: timeoutMs })).stdout;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    if ((err as { killed?: boolean }).killed) throw new Error(`nvidia-smi did not answer within ${timeoutMs} ms`);
    throw new Error(`nvidia-smi failed: ${(err as Error).message.split('\n')[0]}`);
  }
}

/** A query's rows (-L takes no --format). */
const query = (fields: string, timeoutMs: number) => nvidiaSmi([fields, '--format=csv,noheader,nounits'], timeoutMs);

const rows = (csv: string) =>
  csv
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split(',').map((s) => s.trim()));

/** `--query-gpu=${GPU_FIELDS}` output as GpuInfo: rows of its fields only. A line that is not
 *  one ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", with exit
 *  status 0) had been a GPU without a PCI address, and the supervisor died of it at start (an
 *  attack session). */
export function parseGpus(csv: string): GpuInfo[] {
  const fields = GPU_FIELDS.split(',').length;
  const gpu = (row: string[]) => row.length === fields && /^\d+$/.test(row[0]) && /^[0-9A-Fa-f:.]+$/.test(row[3]);
  return rows(csv)
    .filter(gpu)
    .map(([index, name, uuid, pci, total, used, util, driver]) => ({
      index,
      name,
      uuid,
      pci_bus_id: pci,
      memory_total_mib: Number(total),
      memory_used_mib: Number(used),
      utilization_pct: Number(util),
      driver,
    }));
}

/** The MIG devices in `nvidia-smi -L` output, each under the "GPU <index>: … (UUID: GPU-…)" line
 *  of its GPU: "  MIG 1g.10gb     Device  0: (UUID: MIG-…)". Other lines are not devices. */
export function parseMigDevices(list: string): MigDevice[] {
  const devices: MigDevice[] = [];
  let gpu: string | null = null;
  for (const line of list.split('\n')) {
    // A GPU line that does not parse ("GPU 1: Unknown Error") still ends the GPU before it: its
    // MIG devices belong to no GPU this can name.
    if (line.startsWith('GPU ')) gpu = /^GPU (\d+): .*\(UUID: GPU-[^)]+\)\s*$/.exec(line)?.[1] ?? null;
    const mig = /^\s+(MIG\s.*?Device\s+\d+):\s*\(UUID: (MIG-[^)\s]+)\)\s*$/.exec(line);
    if (mig && gpu !== null) devices.push({ uuid: mig[2], gpu, name: mig[1].replace(/\s+/g, ' ') });
  }
  return devices;
}

/** `--query-compute-apps=pid,used_memory` output: MiB per pid, summed over GPUs ("[N/A]" counts
 *  as unknown and is left out). */
export function parseComputeApps(csv: string): Map<number, number> {
  const byPid = new Map<number, number>();
  for (const [pid, used] of rows(csv)) {
    const mib = Number(used);
    if (!/^\d+$/.test(pid) || !Number.isFinite(mib)) continue;
    byPid.set(Number(pid), (byPid.get(Number(pid)) ?? 0) + mib);
  }
  return byPid;
}

/** `--query-compute-apps=pid,gpu_uuid,used_memory` output: one row per process and GPU it holds
 *  memory on ("[N/A]" memory counts as unknown: null). */
export function parseGpuProcesses(csv: string): { pid: number; gpu_uuid: string; used_mib: number | null }[] {
  return rows(csv)
    .filter(([pid]) => /^\d+$/.test(pid))
    .map(([pid, uuid, used]) => ({
      pid: Number(pid),
      gpu_uuid: uuid,
      used_mib: Number.isFinite(Number(used)) && used !== '' ? Number(used) : null,
    }));
}

/** Which GPU each process with a compute context holds memory on; null without nvidia-smi. */
export async function queryGpuProcesses(timeoutMs = 2000): Promise<ReturnType<typeof parseGpuProcesses> | null> {
  const csv = await query('--query-compute-apps=pid,gpu_uuid,used_memory', timeoutMs);
  return csv === null ? null : parseGpuProcesses(csv);
}

/** GPUs as nvidia-smi lists them; null when nvidia-smi is not installed. Throws when it fails. */
export async function queryGpus(timeoutMs = 2000): Promise<GpuInfo[] | null> {
  const csv = await query(`--query-gpu=${GPU_FIELDS}`, timeoutMs);
  return csv === null ? null : parseGpus(csv);
}

/** The MIG devices of the host's GPUs, by `nvidia-smi -L`; null when nvidia-smi is not
 *  installed. Throws when it fails. */
export async function queryMigDevices(timeoutMs = 2000): Promise<MigDevice[] | null> {
  const list = await nvidiaSmi(['-L'], timeoutMs);
  return list === null ? null : parseMigDevices(list);
}

/** GPU memory (MiB) held by each process with a compute context; null without nvidia-smi. */
export async function queryGpuMemory(timeoutMs = 2000): Promise<Map<number, number> | null> {
  const csv = await query('--query-compute-apps=pid,used_memory', timeoutMs);
  return csv === null ? null : parseComputeApps(csv);
}
