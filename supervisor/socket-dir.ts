// The folder of the workers' sockets: TMPDIR/tile-infer.HOST.PID.XXXXXX, removed when the
// supervisor exits, however it exits (a stop, a failed start, an uncaught error). After a kill -9
// nothing runs to remove it, so each start removes the folders of supervisors on this host whose
// process is gone.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pidGone } from '../src/lib/pid.js';

const host =
  hostname()
    .replace(/[^A-Za-z0-9-]/g, '')
    .slice(0, 16) || 'host';
const PREFIX = `tile-infer.${host}.`;

export function makeSocketDir(): string {
  for (const name of readdirSync(tmpdir())) {
    const pid = name.startsWith(PREFIX) ? Number(name.slice(PREFIX.length).split('.')[0]) : NaN;
    if (Number.isInteger(pid) && pid !== process.pid && pidGone(pid))
      rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
  const dir = mkdtempSync(join(tmpdir(), `${PREFIX}${process.pid}.`));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
