// Temporary folders of a test or benchmark process (its services, nginx, Orthanc, packages, kits),
// removed when it exits: the tiers make thousands a run, and left behind they filled a developer
// machine's disk (pkg-* alone: 7.4 GB; a GPU kit build 0.6 GB).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made: string[] = [];
process.once('exit', () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A fresh folder under the system's temporary folder (`prefix-XXXXXX`), removed at exit. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `${prefix}-`));
  made.push(dir);
  return dir;
}
