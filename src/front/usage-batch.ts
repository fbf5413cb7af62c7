// A front's usage entries on their way to the supervisor's one log, in batches, each sent
// USAGE_BATCH_MS after its first entry: a message per turn of the event loop cost the supervisor
// 0.15 CPU ms per tile, and a message every 50 ms still 0.27 at gene-expr's 70-80 tiles/s on the
// cpu provider (each message wakes the supervisor; 0.11-0.13 every 250 ms).
import type { FromFront, UsageReport } from '../ipc/protocol.js';

/** How long usage entries wait to share a message to the supervisor; a front killed outright
 *  loses at most this much of the usage log. */
const USAGE_BATCH_MS = 250;

export class UsageBatch {
  private entries: UsageReport[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    /** Sends to the supervisor; `written` is called once the message has left this process. */
    private readonly send: (message: FromFront, written?: () => void) => void,
  ) {}

  record(entry: UsageReport): void {
    if (this.entries.push(entry) === 1) this.timer = setTimeout(() => void this.flush(), USAGE_BATCH_MS);
  }

  /** Sends the entries not sent yet; resolves once they have left the process. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    if (!this.entries.length) return Promise.resolve();
    const entries = this.entries;
    this.entries = [];
    return new Promise((resolve) => this.send({ type: 'usage', entries }, resolve));
  }
}
