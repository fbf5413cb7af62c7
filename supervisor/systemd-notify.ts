// systemd's readiness protocol (Type=notify): READY=1 once the service can answer, so that
// `systemctl start` returns when it does, STOPPING=1 on the way out, STATUS= in between. Node has
// no Unix datagram sockets, so the messages go through Debian's `systemd-notify` (NotifyAccess=all
// in the unit lets a child speak for the service); nothing happens outside systemd.
import { execFile } from 'node:child_process';
import type { Logger } from 'pino';

export function sdNotify(logger: Logger, ...assignments: string[]): void {
  if (!process.env.NOTIFY_SOCKET) return;
  execFile('systemd-notify', [`--pid=${process.pid}`, ...assignments], (err) => {
    if (err) logger.warn({ err: err.message, assignments }, 'systemd-notify failed');
  });
}
