// Whether a client moves the bytes it holds of the front's budget (a body it is sending, an answer
// it is taking) at a pace worth waiting for. The rule is Apache's mod_reqtimeout MinRate with its
// credit bounded: each byte moved buys 1/MIN_RATE seconds, at most WINDOW_MS ahead. A client at
// MIN_RATE or faster is never behind; one that stops is behind WINDOW_MS later, one that trickles
// below MIN_RATE soon after, whatever it sent in a burst before (a body on its way is judged at
// ANY_RATE: only a stop counts). The front asks only when the budget is full (queue-share.ts):
// then a holder behind gives way to new requests, instead of every new request being refused for
// as long as the slowest clients take (front.body_timeout_ms).

/** Bytes of an answer handed to its connection at once, the next once it has taken them
 *  (plugins/answers.ts, v2/grpc-server.ts): its client's pace shows, and a client on a slow link
 *  takes one in seconds. */
export const ANSWER_PIECE = 256 * 1024;

/** Bytes a second a holder must move to keep its place when others need the budget: 8 Mbit/s,
 *  four answer pieces a second. */
export const MIN_RATE = 4 * ANSWER_PIECE;

/** How long a holder may move nothing, and the most credit a burst buys. */
export const WINDOW_MS = 5000;

/** The rate of a body on its way: any. How fast a front reads a body is its own pace as much as
 *  its client's (on a busy 2-core front, of 192 uploads of 14 MB at once some were read below
 *  MIN_RATE and reset), so an upload falls behind only by sending nothing for WINDOW_MS. */
export const ANY_RATE = 0;

export class Pace {
  private due: number;

  constructor(
    now: number,
    private readonly rate = MIN_RATE,
  ) {
    this.due = now + WINDOW_MS;
  }

  /** `bytes` moved at `now`. */
  moved(bytes: number, now: number): void {
    if (bytes <= 0) return;
    const credit = this.rate > 0 ? (bytes * 1000) / this.rate : WINDOW_MS;
    this.due = Math.min(Math.max(this.due, now - WINDOW_MS) + credit, now + WINDOW_MS);
  }

  /** How far behind its pace the holder is at `now`, in ms (0 or less: keeping it). */
  behind(now: number): number {
    return now - this.due;
  }
}
