// Every front's open HTTP connections, summed and sent to each front, so that a front holding more
// than its share asks clients to reconnect (src/front/connection-share.ts, where the why is).
import { CONNECTIONS_REPORT_MS } from '../src/ipc/protocol.js';

export class ConnectionTally<Front> {
  private readonly counts = new Map<Front, number>();
  private sent = { total: 0, fronts: 0 };
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** Sends every front the sum, and how many fronts listen. */
    private readonly send: (total: number, fronts: number) => void,
    private readonly sendMs = CONNECTIONS_REPORT_MS,
  ) {}

  /** A front listens: it counts among the fronts (with 0 connections until it reports). */
  join(front: Front): void {
    if (!this.counts.has(front)) this.set(front, 0);
  }

  /** A front's count. */
  set(front: Front, open: number): void {
    this.counts.set(front, open);
    this.schedule();
  }

  /** A front exited: its connections went with it. */
  remove(front: Front): void {
    if (this.counts.delete(front)) this.schedule();
  }

  /** The sum, sent at most every sendMs and only when it or the number of fronts changed. */
  private schedule(): void {
    this.timer ??= setTimeout(() => {
      this.timer = null;
      let total = 0;
      for (const n of this.counts.values()) total += n;
      const fronts = this.counts.size;
      if (total === this.sent.total && fronts === this.sent.fronts) return;
      this.sent = { total, fronts };
      this.send(total, fronts);
    }, this.sendMs).unref();
  }
}
