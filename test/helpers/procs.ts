// Processes as the kernel lists them (Linux /proc): what a test needs to prove that no process
// was left behind.
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/** Running, or stopped, but not exited (a zombie waits only for its parent to reap it). */
export function alive(pid: number): boolean {
  try {
    return existsSync(`/proc/${pid}`) && !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** The children of `parent` whose command line contains `command`. */
export function childProcesses(parent: number, command: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === parent && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(command);
      } catch {
        return false; // exited meanwhile
      }
    })
    .map(Number)
    .sort((a, b) => a - b);
}
