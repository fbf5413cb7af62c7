// The worker's load, sent to every front on a fixed beat. A front hears it with each answer to its
// own tiles; the beat also tells the fronts it is not answering, so that each can weigh what the
// other fronts hold here before taking more than its share of the model's queue
// (front/admission.ts `places`, which trusts a report no older than FRESH_MS).
import type { WorkerLoad } from '../ipc/protocol.js';

export const LOAD_REPORT_MS = 100;

/** Timers, injected so that the fast tier can drive the beat. */
export type Every = (fn: () => void, ms: number) => () => void;

const every: Every = (fn, ms) => {
  const timer = setInterval(fn, ms).unref();
  return () => clearInterval(timer);
};

/** Sends `load()` to each of `fronts()` every `ms`; returns the stop. */
export function reportLoad(
  load: () => WorkerLoad,
  fronts: () => Iterable<(load: WorkerLoad) => void>,
  { ms = LOAD_REPORT_MS, timer = every }: { ms?: number; timer?: Every } = {},
): () => void {
  return timer(() => {
    const now = load();
    for (const send of fronts()) send(now);
  }, ms);
}
