// This front's part of each model's queue: the tickets of admitted requests (admission.ts decides
// by the places this front may hold, its share of max_queue or the room the other fronts leave,
// and by the expected wait), the places their tiles hold once sent to a worker, and a bound on
// the request bytes the front holds.
import { modelEntry, type ServiceConfig } from '../config/config.js';
import { errors } from '../lib/errors.js';
import { arrivingTiles, decide, places, ROOM_SLACK, type Arrival, type InstanceLoad } from './admission.js';
import type { RequestBytes, Ticket, Upload } from './backend.js';

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
    const instances = this.instances(model);
    const held = this.queued(model);
    const decision = decide({
      held,
      arriving: arrivingTiles(this.arriving.get(model) ?? [], Date.now(), entry.request_timeout_ms) + tiles - 1,
      places: this.places(model, instances),
      timeoutMs: entry.request_timeout_ms,
      instances,
    });
    if (!decision.admit)
      throw errors.queueFull(
        model,
        decision.reason === 'places'
          ? this.full(model, held)
          : `an expected wait of ${Math.round(decision.waitMs)} ms, past its ${entry.request_timeout_ms} ms deadline`,
        decision.retryAfterS,
      );
    const limit = this.config.front.max_inflight_bytes;
    if (this.inflightBytes >= limit) throw errors.frontBusy(limit);
    const body = this.requestBytes();
    // Until its tiles go to a worker the request counts only in the estimate: a slow upload holds
    // no place in the queue.
    const arrived = upload ? () => Math.min(1, (body.bytes() + upload.buffered()) / upload.declared) : () => 1;
    const arrival: Arrival = { tiles, since: Date.now(), arrived };
    const arrivals = this.arriving.get(model) ?? new Set<Arrival>();
    this.arriving.set(model, arrivals.add(arrival));
    let released = false;
    return {
      received: body.received,
      hold: () => {
        const now = this.queued(model);
        if (now >= this.places(model, this.instances(model))) throw errors.queueFull(model, this.full(model, now), 1);
        if (arrival.tiles > 0 && --arrival.tiles === 0) arrivals.delete(arrival);
        this.outstanding.set(model, now + 1);
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
        body.release();
      },
    };
  }

  /** Request bytes held against the front's budget as they arrive (an admitted request's body; a
   *  gRPC message, before it names its model; an answer, HTTP's or gRPC's, not yet taken), until
   *  released. Bytes that still pass after the release (the rest of a body whose answer has gone)
   *  are not held: nothing would give them back.
   *  `control`: a call that asks no model (gRPC health and metadata) may also use a reserve as
   *  large as the budget, so that probes are answered while requests and answers hold it all. */
  requestBytes(control = false): RequestBytes {
    const limit = this.config.front.max_inflight_bytes * (control ? 2 : 1);
    let bytes = 0;
    let released = false;
    const held = (n: number) => {
      if (released) return;
      this.inflightBytes += n;
      bytes += n;
    };
    return {
      received: (n) => {
        if (!released && this.inflightBytes + n > limit) throw errors.frontBusy(limit);
        held(n);
      },
      held,
      bytes: () => bytes,
      release: () => {
        this.inflightBytes -= bytes;
        bytes = 0;
        released = true;
      },
    };
  }

  /** Each front may hold its share of the model's queue, and what the others leave of it. */
  private places(model: string, instances: InstanceLoad[]): number {
    const { max_queue } = this.entry(model);
    return places(this.share(max_queue), max_queue, instances, this.fronts > 1 ? ROOM_SLACK : 0);
  }

  private share(maxQueue: number): number {
    return Math.max(1, Math.ceil(maxQueue / this.fronts));
  }

  private full(model: string, held: number): string {
    const share = this.share(this.entry(model).max_queue);
    return `${held} tiles outstanding on this front: its share of max_queue (${share})${held > share ? ' and the room the other fronts left, or its slack' : ''}`;
  }

  private entry(model: string) {
    return modelEntry(this.config, model);
  }
}
