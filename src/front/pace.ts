// Whether a client moves the bytes it holds of the front's budget (a body it is sending, an answer
// it is taking) at a pace worth waiting for. The rule is Apache's mod_reqtimeout MinRate with its
// credit bounded: each byte moved buys 1/MIN_RATE seconds, at most WINDOW_MS ahead. A client at
// MIN_RATE or faster is never behind; one that stops is behind WINDOW_MS later, one that trickles
// below MIN_RATE soon after, whatever it sent in a burst before. The front asks only when the
// budget is full (queue-share.ts): then a holder behind gives way to new requests, instead of every
// new request being refused for as long as the slowest clients take (front.body_timeout_ms).

/** Bytes of an answer handed to its connection at once, the next once it has taken them
 *  (plugins/answers.ts, v2/grpc-server.ts): its client's pace shows, and a client on a slow link
 *  takes one in seconds. */
export const ANSWER_PIECE = 256 * 1024;

/** Bytes a second a holder must move to keep its place when others need the budget: 8 Mbit/s,
 *  four answer pieces a second. */
export const MIN_RATE = 4 * ANSWER_PIECE;

/** How long a holder may move nothing, and the most credit a burst buys. */
export const WINDOW_MS = 5000;

export class Pace {
  private due: number;

  constructor(now: number) {
    this.due = now + WINDOW_MS;
  }

  /** `bytes` moved at `now`. */
  moved(bytes: number, now: number): void {
    this.due = Math.min(Math.max(this.due, now - WINDOW_MS) + (bytes * 1000) / MIN_RATE, now + WINDOW_MS);
  }

  /** How far behind its pace the holder is at `now`, in ms (0 or less: keeping it). */
  behind(now: number): number {
    return now - this.due;
  }
}
