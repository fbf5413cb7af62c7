// A front's share of the service's HTTP connections. The fronts accept from one shared socket
// (supervisor/fronts.ts), and the kernel gives a new connection to whichever front accepts first:
// a burst of keep-alive connections (a client opening its pool, a load balancer) lands mostly on
// one front, which then serves nearly every request while the others idle (64 connections opened
// together: 60-64 of them on one of two fronts in 6 of 8 bursts). So each front reports how many
// it holds, the supervisor sends every front the sum (supervisor/connection-tally.ts), and a front
// holding more than its share answers with `Connection: close`: the client reconnects, and the
// front that is waiting to accept, the idle one, takes the new connection.
import { CONNECTIONS_REPORT_MS } from '../ipc/protocol.js';

/** The sockets a front serves HTTP on (net.Socket's part of it that counting needs). */
export interface CountedSocket {
  /** Set before 'close' is emitted: a response can still be sent on a socket whose client left
   *  mid-request, which must not be counted as leaving. */
  readonly destroyed: boolean;
  once(event: 'close', listener: () => void): unknown;
}

export class ConnectionShare {
  private open = 0;
  /** Connections whose response said `Connection: close`, not closed yet. */
  private readonly leaving = new WeakSet<CountedSocket>();
  private leavingCount = 0;
  private total = 0;
  private fronts = 1;
  private reported = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** Sends this front's count to the supervisor. */
    private readonly report: (open: number) => void,
    private readonly reportMs = CONNECTIONS_REPORT_MS,
  ) {}

  /** Counts a connection the front accepted, until it closes. */
  track(socket: CountedSocket): void {
    this.open++;
    this.schedule();
    socket.once('close', () => {
      this.open--;
      if (this.leaving.delete(socket)) this.leavingCount--;
      this.schedule();
    });
  }

  /** Every front's connections together, and how many fronts listen, from the supervisor. */
  update(total: number, fronts: number): void {
    this.total = total;
    this.fronts = fronts;
  }

  /** Whether the response about to be sent on `socket` should close it: this front holds more
   *  than its share, not counting the connections already leaving. Not while its count has grown
   *  past the last sum (the others' counts are then older than its own). */
  shouldClose(socket: CountedSocket): boolean {
    if (socket.destroyed) return false;
    if (this.leaving.has(socket)) return true;
    const staying = this.open - this.leavingCount;
    if (this.fronts < 2 || this.open > this.total || staying <= Math.ceil(this.total / this.fronts)) return false;
    this.leaving.add(socket);
    this.leavingCount++;
    return true;
  }

  /** The count, sent at most every reportMs and only when it changed. */
  private schedule(): void {
    this.timer ??= setTimeout(() => {
      this.timer = null;
      if (this.open === this.reported) return;
      this.reported = this.open;
      this.report(this.open);
    }, this.reportMs).unref();
  }
}
