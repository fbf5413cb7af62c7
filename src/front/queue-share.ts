// This front's part of each model's queue: the tickets of admitted requests (admission.ts decides
// by this front's share of max_queue and the expected wait), the places their tiles hold once
// sent to a worker, and a bound on the request bytes the front holds.
import { modelEntry, type ServiceConfig } from '../config/config.js';
import { errors } from '../lib/errors.js';
import { arrivingTiles, decide, type Arrival, type InstanceLoad } from './admission.js';
import type { Ticket, Upload } from './backend.js';

export class QueueShare {
  /** Per model: tiles sent to a worker and not yet finished or dropped there: its queue. */
  private readonly outstanding = new Map<string, number>();
  /** Per model: requests admitted whose body is still arriving, with the tiles each has not sent
   *  to a worker yet and when it was admitted. */
  private readonly arriving = new Map<string, Set<Arrival>>();
  /** Request bytes received and held by this front. */
  private inflightBytes = 0;

  constructor(
    private readonly config: ServiceConfig,
    /** How many fronts share each model's queue. */
    private readonly fronts: number,
    /** The model's ready instances, as admission weighs them. */
    private readonly instances: (model: string) => InstanceLoad[],
  ) {}

  /** Requests this front holds for `model`. */
  queued(model: string): number {
    return this.outstanding.get(model) ?? 0;
  }

  /** Admits a request of `tiles` tiles for a model that can take requests: its ticket, or throws
   *  why not (queue full, front busy). */
  admit(model: string, tiles: number, upload?: Upload): Ticket {
    const entry = this.entry(model);
    const share = this.share(model);
    const held = this.queued(model);
    const decision = decide({
      held,
      arriving: arrivingTiles(this.arriving.get(model) ?? [], Date.now(), entry.request_timeout_ms) + tiles - 1,
      share,
      timeoutMs: entry.request_timeout_ms,
      instances: this.instances(model),
    });
    const shareFull = `${share} requests outstanding on this front, its share of max_queue`;
    if (!decision.admit)
      throw errors.queueFull(
        model,
        decision.reason === 'share'
          ? shareFull
          : `an expected wait of ${Math.round(decision.waitMs)} ms, past its ${entry.request_timeout_ms} ms deadline`,
        decision.retryAfterS,
      );
    const limit = this.config.front.max_inflight_bytes;
    if (this.inflightBytes >= limit) throw errors.frontBusy(limit);
    // Until its tiles go to a worker the request counts only in the estimate: a slow upload holds
    // no place in the queue.
    let bytes = 0;
    const arrived = upload ? () => Math.min(1, (bytes + upload.buffered()) / upload.declared) : () => 1;
    const arrival: Arrival = { tiles, since: Date.now(), arrived };
    const arrivals = this.arriving.get(model) ?? new Set<Arrival>();
    this.arriving.set(model, arrivals.add(arrival));
    let released = false;
    return {
      received: (n) => {
        if (this.inflightBytes + n > limit) throw errors.frontBusy(limit);
        this.inflightBytes += n;
        bytes += n;
      },
      hold: () => {
        if (this.queued(model) >= share) throw errors.queueFull(model, shareFull, 1);
        if (arrival.tiles > 0 && --arrival.tiles === 0) arrivals.delete(arrival);
        this.outstanding.set(model, this.queued(model) + 1);
        let held = true;
        return () => {
          if (held) this.outstanding.set(model, this.queued(model) - 1);
          held = false;
        };
      },
      release: () => {
        if (released) return;
        released = true;
        arrivals.delete(arrival);
        this.inflightBytes -= bytes;
      },
    };
  }

  /** Each front may hold its share of the model's queue: together never more than max_queue. */
  private share(model: string): number {
    return Math.max(1, Math.ceil(this.entry(model).max_queue / this.fronts));
  }

  private entry(model: string) {
    return modelEntry(this.config, model);
  }
}
