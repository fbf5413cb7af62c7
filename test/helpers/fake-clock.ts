// A clock for in-process tests of the supervisor's life cycles: time moves only when the test
// calls advance(), which runs every timer that falls due on the way, in order.
import type { Clock, Timer } from '../../supervisor/clock.js';

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
  every: number | null;
}

export class FakeClock implements Clock {
  private time: number;
  private seq = 0;
  private readonly pending = new Set<Pending>();

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  setTimeout(fn: () => void, ms: number): Timer {
    return this.add(fn, ms, null);
  }

  setInterval(fn: () => void, ms: number): Timer {
    return this.add(fn, ms, Math.max(1, ms));
  }

  clear(timer: Timer | null | undefined): void {
    if (timer) this.pending.delete(timer as Pending);
  }

  /** Timers waiting to run. */
  get timers(): number {
    return this.pending.size;
  }

  /** Moves time forward by `ms`, running each timer at its due time (earliest first). */
  advance(ms: number): void {
    const end = this.time + ms;
    for (let next = this.due(end); next; next = this.due(end)) {
      this.time = next.at;
      if (next.every === null) this.pending.delete(next);
      else next.at += next.every;
      next.fn();
    }
    this.time = end;
  }

  private due(end: number): Pending | undefined {
    let first: Pending | undefined;
    for (const p of this.pending)
      if (p.at <= end && (!first || p.at < first.at || (p.at === first.at && p.seq < first.seq))) first = p;
    return first;
  }

  private add(fn: () => void, ms: number, every: number | null): Pending {
    const timer = { at: this.time + Math.max(0, ms), seq: this.seq++, fn, every };
    this.pending.add(timer);
    return timer;
  }
}
