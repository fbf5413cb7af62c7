// CPU time per process role of a running service, from /proc: the supervisor, its HTTP fronts and
// its model workers (told apart by their command lines), summed over each role's processes.
import { readdirSync, readFileSync } from 'node:fs';

const TICK_MS = 10; // USER_HZ is 100 on Linux

export type Role = 'supervisor' | 'fronts' | 'workers';

function stat(pid: number): { ppid: number; cpuMs: number } | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // fields[0] is state (field 3): ppid is field 4, utime 14, stime 15.
    return { ppid: Number(fields[1]), cpuMs: (Number(fields[11]) + Number(fields[12])) * TICK_MS };
  } catch {
    return null;
  }
}

/** A process's role; null once it has exited (between reading its stat and its command line). */
function roleOf(pid: number, supervisor: number): Role | null {
  if (pid === supervisor) return 'supervisor';
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('worker/main.js') ? 'workers' : 'fronts';
  } catch {
    return null;
  }
}

/** CPU milliseconds used so far by each role of the service whose supervisor is `supervisor`
 *  (the `sh -c exec node ...` wrapper becomes that node process). */
export function cpuByRole(supervisor: number): Record<Role, number> {
  const totals: Record<Role, number> = { supervisor: 0, fronts: 0, workers: 0 };
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!pid) continue;
    const s = stat(pid);
    if (!s || (pid !== supervisor && s.ppid !== supervisor)) continue;
    const role = roleOf(pid, supervisor);
    if (role) totals[role] += s.cpuMs;
  }
  return totals;
}

/** CPU milliseconds of a process and its children (the irreducible server's cluster). */
export function cpuOfTree(root: number): number {
  let total = stat(root)?.cpuMs ?? 0;
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    const s = pid ? stat(pid) : null;
    if (s && s.ppid === root) total += s.cpuMs;
  }
  return total;
}
