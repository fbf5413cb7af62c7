// The worker's load, as each front hears it. A front hears it with each answer to its own tiles
// and from a beat: every LOAD_REPORT_MS the worker sends each front its load while it is busy, or
// when it differs from what that front last heard, and every LOAD_KEEPALIVE_MS all the same. The
// reports tell the fronts what the worker holds from the others, so that each can weigh that
// before taking more than its share of the model's queue (front/admission.ts `places`, which
// trusts a report no older than FRESH_MS, an idle one IDLE_FRESH_MS). An idle worker is silent
// but for the keepalive: sent every beat, six idle workers' reports cost two fronts ~70 CPU-ms a
// second.
import { isIdle, LOAD_KEEPALIVE_MS, LOAD_REPORT_MS, type WorkerLoad } from '../ipc/protocol.js';

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

/** One front's ear: the load it last heard from this worker, and how to tell it another. */
export class FrontHearing {
  private last!: WorkerLoad;
  private beatsSince = 0;

  /** A front that connects is told `load` at once: an idle worker's beat is silent. */
  constructor(
    private readonly send: (load: WorkerLoad) => void,
    load: WorkerLoad,
  ) {
    this.tell(load);
  }

  /** The front heard `load` (with an answer). */
  heard(load: WorkerLoad): void {
    this.last = load;
    this.beatsSince = 0;
  }

  /** Sends it `load`. */
  tell(load: WorkerLoad): void {
    this.send(load);
    this.heard(load);
  }

  /** A beat: `load` unless the front heard it already, the worker is idle, and the keepalive is
   *  not due. A busy worker's load drains between reports (admission.ts `queued`), so it is
   *  sent every beat. */
  beat(load: WorkerLoad, ms: number, keepaliveMs: number): void {
    if (isIdle(load) && sameLoad(load, this.last) && ++this.beatsSince * ms < keepaliveMs) return;
    this.tell(load);
  }
}

/** Beats every `ms`: each of `fronts()` is sent `load()` as FrontHearing.beat decides; returns
 *  the stop. */
export function reportLoad(
  load: () => WorkerLoad,
  fronts: () => Iterable<FrontHearing>,
  {
    ms = LOAD_REPORT_MS,
    keepaliveMs = LOAD_KEEPALIVE_MS,
    timer = every,
  }: { ms?: number; keepaliveMs?: number; timer?: Every } = {},
): () => void {
  return timer(() => {
    const now = load();
    for (const front of fronts()) front.beat(now, ms, keepaliveMs);
  }, ms);
}
