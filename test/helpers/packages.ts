// Model package variants for tests: a shipped package copied with its manifest edited, or broken.
import { execSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODELS } from './server.js';
import { tempDir } from '../../tools/temp-dir.js';

export function copyPackage(
  model: string,
  edit: (manifest: Record<string, any>) => void = () => {},
  root = tempDir('pkg'),
): string {
  const dir = join(root, model);
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(MODELS, model, 'model.onnx'), join(dir, 'model.onnx'));
  const manifest = JSON.parse(readFileSync(join(MODELS, model, 'manifest.json'), 'utf8'));
  edit(manifest);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  return dir;
}

/** A package whose model.onnx is not an ONNX graph (a truncated download, say): the shipped tissue-seg graph is ~2 KB, so 1000 bytes cuts every package. */
export function corruptPackage(model: string): string {
  const dir = copyPackage(model);
  writeFileSync(join(dir, 'model.onnx'), readFileSync(join(dir, 'model.onnx')).subarray(0, 1000));
  return dir;
}

/** A folder on PATH with a fake nvidia-smi that prints `lines` for --query-gpu (or hangs when
 *  lines is null), for --query-compute-apps `appMib` MiB for every model worker process
 *  running on the machine (none when appMib is null), and for -L each GPU of `lines` with the
 *  MIG devices `mig` gives its index, in the form of NVIDIA's MIG user guide. */
export function fakeNvidiaSmi(
  lines: string[] | null,
  appMib: number | null = null,
  mig: Record<string, string[]> = {},
): string {
  const dir = tempDir('bin');
  const echo = (out: string[]) => (lines === null ? 'sleep 30' : out.map((l) => `echo "${l}"`).join('\n'));
  const gpus = echo(lines ?? []);
  const list = echo(
    (lines ?? []).flatMap((l) => {
      const [index, name, uuid] = l.split(', ');
      return [
        `GPU ${index}: ${name} (UUID: ${uuid})`,
        ...(mig[index] ?? []).map((id, i) => `  MIG 1g.10gb     Device  ${i}: (UUID: ${id})`),
      ];
    }),
  );
  const apps =
    appMib === null
      ? ':'
      : `grep -l -s worker/main.js /proc/[0-9]*/cmdline | sed 's#/proc/\\([0-9]*\\)/cmdline#\\1, ${appMib}#'; exit 0`;
  writeFileSync(
    join(dir, 'nvidia-smi'),
    `#!/bin/sh\ncase "$1" in\n--query-compute-apps=*)\n${apps}\n;;\n-L)\n${list}\n;;\n*)\n${gpus}\n;;\nesac\n`,
    { mode: 0o755 },
  );
  return dir;
}

/** A package's sha256 as the README computes it from a shell: over every file of the folder,
 *  symlinks followed. */
export const shellDigest = (dir: string) =>
  execSync('find -L . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum', {
    cwd: dir,
    encoding: 'utf8',
  }).split(' ')[0];
