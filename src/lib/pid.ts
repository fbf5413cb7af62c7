// Whether a process of this host is gone: signal 0 tests for it without touching it (EPERM: it
// is there, another user's). For lock and temporary files whose maker is named by its pid.
export function pidGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
