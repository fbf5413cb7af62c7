// Where NVIDIA's Vulkan driver (ICD) is, so that the Vulkan loader finds it. The loader reads ICD
// manifests from /etc/vulkan/icd.d, /usr/share/vulkan/icd.d and /usr/local/share/vulkan/icd.d
// (and XDG_* dirs); NVIDIA's container toolkit and some driver installs keep the manifest, or only
// the library (libGLX_nvidia.so.0, which is the Vulkan ICD), under /usr/local/nvidia. A manifest
// the loader would not find is named in VK_ICD_FILENAMES (every loader version reads it; it
// replaces the search, which on a GPU host hides only software devices); a library without a
// manifest gets one written for it.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SEARCHED = ['/etc/vulkan/icd.d', '/usr/share/vulkan/icd.d', '/usr/local/share/vulkan/icd.d'];
const ELSEWHERE = [
  '/usr/local/nvidia/share/vulkan/icd.d',
  '/usr/local/nvidia/etc/vulkan/icd.d',
  '/usr/local/nvidia/icd.d',
  '/usr/local/nvidia/vulkan/icd.d',
];
const MANIFESTS = ['nvidia_icd.json', 'nvidia_icd.x86_64.json'];
const LIBRARY_DIRS = ['/usr/local/nvidia/lib64', '/usr/local/nvidia/lib', '/usr/lib/x86_64-linux-gnu', '/usr/lib64'];

export interface IcdSearch {
  /** The manifest used: found by the loader itself, found elsewhere, or written for a library. */
  manifest: string | null;
  how: 'loader' | 'named' | 'written' | 'environment' | 'none';
  /** Variables the service and the probes get. */
  env: Record<string, string>;
  note: string;
}

function nvidiaLibrary(): string | null {
  for (const dir of LIBRARY_DIRS)
    if (existsSync(join(dir, 'libGLX_nvidia.so.0'))) return join(dir, 'libGLX_nvidia.so.0');
  try {
    const line = execFileSync('ldconfig', ['-p'], { encoding: 'utf8', timeout: 5000 })
      .split('\n')
      .find((l) => l.includes('libGLX_nvidia.so.0'));
    return line ? line.split('=> ')[1].trim() : null;
  } catch {
    return null;
  }
}

export function findNvidiaIcd(env: NodeJS.ProcessEnv = process.env): IcdSearch {
  const given = env.VK_DRIVER_FILES ?? env.VK_ICD_FILENAMES ?? env.VK_ADD_DRIVER_FILES;
  if (given)
    return { manifest: given, how: 'environment', env: {}, note: `Vulkan drivers from the environment: ${given}` };
  const at = (dirs: string[]) =>
    dirs.flatMap((d) => MANIFESTS.map((m) => join(d, m))).find((p) => existsSync(p)) ?? null;
  const standard = at(SEARCHED);
  if (standard) return { manifest: standard, how: 'loader', env: {}, note: `NVIDIA's Vulkan ICD: ${standard}` };
  const add = (manifest: string) => ({ VK_ICD_FILENAMES: manifest });
  const other = at(ELSEWHERE);
  if (other)
    return {
      manifest: other,
      how: 'named',
      env: add(other),
      note: `NVIDIA's Vulkan ICD outside the loader's search path, named in VK_ICD_FILENAMES: ${other}`,
    };
  const library = nvidiaLibrary();
  if (!library)
    return {
      manifest: null,
      how: 'none',
      env: {},
      note: 'no NVIDIA Vulkan ICD (no nvidia_icd.json, no libGLX_nvidia.so.0)',
    };
  const manifest = join(mkdtempSync(join(tmpdir(), 'gpu-report-icd-')), 'nvidia_icd.json');
  writeFileSync(
    manifest,
    JSON.stringify({ file_format_version: '1.0.0', ICD: { library_path: library, api_version: '1.3.0' } }),
  );
  return { manifest, how: 'written', env: add(manifest), note: `no nvidia_icd.json; one written for ${library}` };
}

/** Why the loader can find NVIDIA's ICD and no device (seen on an H200, docs/gpu.md):
 *  libGLX_nvidia.so.0 opens libglvnd's libEGL.so.1 at run time, which needs libGLdispatch.so.0. */
export const GLVND_HINT =
  "NVIDIA's libGLX_nvidia.so.0 needs libglvnd's libEGL.so.1 and libGLdispatch.so.0 (Debian: libegl1), which a kit built with --vulkan-loader brings under lib/";
