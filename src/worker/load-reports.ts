// The worker's load, as each front hears it. A front hears it with each answer to its own tiles
// and from a beat: every LOAD_REPORT_MS the worker sends each front its load while it is busy, or
// when it differs from what that front last heard, and every LOAD_KEEPALIVE_MS all the same. The
// reports tell the fronts what the worker holds from the others, so that each can weigh that
// before taking more than its share of the model's queue (front/admission.ts `places`, which
// trusts a report no older than FRESH_MS, an idle one IDLE_FRESH_MS). An idle worker is silent
// but for the keepalive: sent every beat, six idle workers' reports cost two fronts ~70 CPU-ms a
// second. Its beat sleeps too, until the keepalive or until tiles come (`wake`): ten wakeups a
// second cost each idle worker ~4 CPU-ms a second of cold code on a 2-core VM.
import { isIdle, LOAD_KEEPALIVE_MS, LOAD_REPORT_MS, type WorkerLoad } from '../ipc/protocol.js';

/** A one-shot timer, injected so that the fast tier can drive the beat; returns its cancel. */
export type After = (fn: () => void, ms: number) => () => void;

const after: After = (fn, ms) => {
  const timer = setTimeout(fn, ms).unref();
  return () => clearTimeout(timer);
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
  /** Milliseconds of beats since it last heard the load. */
  private sinceMs = 0;

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
    this.sinceMs = 0;
  }

  /** Sends it `load`. */
  tell(load: WorkerLoad): void {
    this.send(load);
    this.heard(load);
  }

  /** A beat `ms` after the one before: `load` unless the front heard it already, the worker is
   *  idle, and the keepalive is not due. A busy worker's load drains between reports
   *  (admission.ts `queued`), so it is sent every beat. */
  beat(load: WorkerLoad, ms: number, keepaliveMs: number): void {
    this.sinceMs += ms;
    if (isIdle(load) && sameLoad(load, this.last) && this.sinceMs < keepaliveMs) return;
    this.tell(load);
  }
}

/** The beat's controls: `wake` when tiles come (a sleeping beat beats within `ms` again). */
export interface LoadBeat {
  wake(): void;
  stop(): void;
}

/** Beats every `ms` while the worker is busy: each of `fronts()` is sent `load()` as
 *  FrontHearing.beat decides. Once a beat finds the worker idle (every front has then heard the
 *  idle load) the next is at the keepalive, unless `wake` comes first. */
export function reportLoad(
  load: () => WorkerLoad,
  fronts: () => Iterable<FrontHearing>,
  {
    ms = LOAD_REPORT_MS,
    keepaliveMs = LOAD_KEEPALIVE_MS,
    timer = after,
  }: { ms?: number; keepaliveMs?: number; timer?: After } = {},
): LoadBeat {
  let interval = ms;
  /** What the next beat counts as the time since the one before: its delay, or after a wake the
   *  keepalive (the sleep it cut short is not timed: a front that heard nothing meanwhile is told
   *  again rather than late). */
  let since = ms;
  let cancel = () => {};
  let stopped = false;
  const schedule = (next: number, counted = next) => {
    interval = next;
    since = counted;
    cancel = timer(beat, next);
  };
  function beat() {
    const now = load();
    for (const front of fronts()) front.beat(now, since, keepaliveMs);
    if (!stopped) schedule(isIdle(now) ? keepaliveMs : ms);
  }
  schedule(ms);
  return {
    wake() {
      if (stopped || interval === ms) return;
      cancel();
      schedule(ms, keepaliveMs);
    },
    stop() {
      stopped = true;
      cancel();
    },
  };
}
