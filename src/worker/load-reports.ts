// The worker's load, sent to every front when it changes (looked at every LOAD_REPORT_MS) and
// every LOAD_KEEPALIVE_MS unchanged. A front hears it with each answer to its own tiles; the
// reports also tell the fronts what it holds from the others, so that each can weigh that before
// taking more than its share of the model's queue (front/admission.ts `places`, which trusts a
// report no older than FRESH_MS). A front that connects hears it at once (main.ts).
import { LOAD_KEEPALIVE_MS, LOAD_REPORT_MS, type WorkerLoad } from '../ipc/protocol.js';

/** Timers, injected so that the fast tier can drive the beat. */
export type Every = (fn: () => void, ms: number) => () => void;

const every: Every = (fn, ms) => {
  const timer = setInterval(fn, ms).unref();
  return () => clearInterval(timer);
};

const sameLoad = (a: WorkerLoad, b: WorkerLoad) =>
  a.queued === b.queued &&
  a.held === b.held &&
  a.maxHeld === b.maxHeld &&
  a.batchMs === b.batchMs &&
  a.maxBatch === b.maxBatch;

/** Looks at `load()` every `ms` and sends it to each of `fronts()` when it changed, or when
 *  `keepaliveMs` have passed since it was last sent; returns the stop. */
export function reportLoad(
  load: () => WorkerLoad,
  fronts: () => Iterable<(load: WorkerLoad) => void>,
  {
    ms = LOAD_REPORT_MS,
    keepaliveMs = LOAD_KEEPALIVE_MS,
    timer = every,
  }: { ms?: number; keepaliveMs?: number; timer?: Every } = {},
): () => void {
  let last: WorkerLoad | null = null;
  let unsentBeats = 0;
  return timer(() => {
    const now = load();
    if (last && sameLoad(now, last) && ++unsentBeats * ms < keepaliveMs) return;
    last = now;
    unsentBeats = 0;
    for (const send of fronts()) send(now);
  }, ms);
}
