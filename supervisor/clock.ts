// Time as the supervisor's life cycles see it: the clock and the timers, as one object so that
// tests can pass a clock they move by hand and run restarts, backoff and timeouts in milliseconds.

/** A pending timer; only its clock knows what it is. */
export type Timer = object;

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): Timer;
  setInterval(fn: () => void, ms: number): Timer;
  /** Cancels a timeout or an interval; nothing for null or undefined. */
  clear(timer: Timer | null | undefined): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  setInterval: (fn, ms) => setInterval(fn, ms),
  // Node's clearTimeout clears intervals too.
  clear: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
};
