// This front's part of each model's queue: the tickets of admitted requests (admission.ts decides
// by the places this front may hold, its share of max_queue or the room the other fronts leave,
// and by the expected wait), the places their tiles hold once sent to a worker, and a bound on
// the request bytes the front holds, of which a holder that falls behind its pace (pace.ts) gives
// way when the budget is full.
import { modelEntry, type ServiceConfig } from '../config/config.js';
import { errors } from '../lib/errors.js';
import { arrivingTiles, decide, places, ROOM_SLACK, type Arrival, type InstanceLoad } from './admission.js';
import type { Evictable, RequestBytes, Ticket, Upload } from './backend.js';
import { ANY_RATE, MIN_RATE, Pace } from './pace.js';

/** Bytes held by a client that can be let go of: a body on its way, an answer being taken. */
interface Holder {
  pace: Pace;
  /** Waiting for its turn on its connection (Evictable.queued), paced from when it began to. */
  queued: boolean;
  /** What its eviction ends with it: itself, or its connection. */
  readonly connection: object;
  bytes(): number;
  /** Gives its bytes back and ends what holds them (closes the connection, resets the stream). */
  evict(): void;
}

type Holding = RequestBytes & {
  /** Its bytes stay held, but no longer by the client: it cannot be evicted. */
  settle(): void;
};

export class QueueShare {
  /** Per model: tiles sent to a worker and not yet finished or dropped there: its queue. */
  private readonly outstanding = new Map<string, number>();
  /** Per model: requests admitted whose body is still arriving, with the tiles each has not sent
   *  to a worker yet and when it was admitted. */
  private readonly arriving = new Map<string, Set<Arrival>>();
  /** Request bytes received and held by this front. */
  private inflightBytes = 0;
  /** Holders a client keeps going (requestBytes' `evict`), while they hold bytes. */
  private readonly evictable = new Set<Holder>();

  constructor(
    private readonly config: ServiceConfig,
    /** How many fronts share each model's queue. */
    private readonly fronts: number,
    /** The model's ready instances, as admission weighs them. */
    private readonly instances: (model: string) => InstanceLoad[],
    private readonly now: () => number = Date.now,
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
      arriving: arrivingTiles(this.arriving.get(model) ?? [], this.now(), entry.request_timeout_ms) + tiles - 1,
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
    if (!this.roomFor(1, limit)) throw errors.frontBusy(limit);
    // An upload the client stops sending gives way to others; once whole, it waits for the model.
    const body = this.holding(
      false,
      upload && { evict: upload.abandon, rate: ANY_RATE, connection: upload.connection },
    );
    // Until its tiles go to a worker the request counts only in the estimate: a slow upload holds
    // no place in the queue.
    const declared = upload?.declared;
    const arrived = declared ? () => Math.min(1, (body.bytes() + upload!.buffered()) / declared) : () => 1;
    const arrival: Arrival = { tiles, since: this.now(), arrived };
    const arrivals = this.arriving.get(model) ?? new Set<Arrival>();
    this.arriving.set(model, arrivals.add(arrival));
    let released = false;
    return {
      received: body.received,
      arrived: body.settle,
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
   *  large as the budget, so that probes are answered while requests and answers hold it all.
   *  `client`: given, the holder's client keeps its place while it keeps pace (pace.ts, counted
   *  by `received` and `taken`; for a body on its way ANY_RATE), and past that gives way when the
   *  budget is full, with every holder on its connection. */
  requestBytes(control = false, client?: Evictable): RequestBytes {
    return this.holding(control, client);
  }

  private holding(control: boolean, client: Evictable | undefined): Holding {
    const limit = this.config.front.max_inflight_bytes * (control ? 2 : 1);
    let bytes = 0;
    let released = false;
    const paced = () => new Pace(this.now(), client?.rate ?? MIN_RATE);
    const holder: Holder | undefined = client && {
      pace: paced(),
      queued: client.queued ?? false,
      connection: client.connection ?? {},
      bytes: () => bytes,
      evict: () => {
        release();
        client.evict();
      },
    };
    if (holder) this.evictable.add(holder);
    const held = (n: number) => {
      if (released) return;
      this.inflightBytes += n;
      bytes += n;
    };
    const moved = (n: number) => holder?.pace.moved(n, this.now());
    const release = () => {
      this.inflightBytes -= bytes;
      bytes = 0;
      released = true;
      if (holder) this.evictable.delete(holder);
    };
    return {
      received: (n) => {
        moved(n);
        if (!released && !this.roomFor(n, limit, holder)) throw errors.frontBusy(limit);
        held(n);
      },
      held,
      taken: moved,
      turn: () => {
        if (!holder?.queued) return;
        holder.queued = false;
        holder.pace = paced();
      },
      bytes: () => bytes,
      release,
      settle: () => holder && this.evictable.delete(holder),
    };
  }

  /** Whether `n` more bytes fit under `limit`, once connections, if needed, have been let go of
   *  (never `keep`'s, the one asking): first those furthest behind their pace, as far behind as
   *  the furthest of their holders that hold bytes; then, if that is not room enough, those whose
   *  answers have waited longest past WINDOW_MS for their turn (queued behind one whose model is
   *  still at work: not their client's fault, but done work holding what others need). A
   *  connection gives back all its holders' bytes. None is let go of when all those that could
   *  be would not make the room together. */
  private roomFor(n: number, limit: number, keep?: Holder): boolean {
    const over = this.inflightBytes + n - limit;
    if (over <= 0) return true;
    const now = this.now();
    const connections = new Map<object, Holder[]>();
    for (const h of this.evictable) {
      const holders = connections.get(h.connection);
      if (holders) holders.push(h);
      else connections.set(h.connection, [h]);
    }
    const bytes = (holders: Holder[]) => holders.reduce((sum, h) => sum + h.bytes(), 0);
    const lag = (holders: Holder[], queued: boolean) =>
      Math.max(...holders.map((h) => (h.bytes() > 0 && h.queued === queued ? h.pace.behind(now) : -Infinity)));
    const open = [...connections.values()].filter((holders) => !(keep && holders.includes(keep)) && bytes(holders) > 0);
    const behind = open.filter((holders) => lag(holders, false) > 0).sort((a, b) => lag(b, false) - lag(a, false));
    const waited = open
      .filter((holders) => lag(holders, false) <= 0 && lag(holders, true) > 0)
      .sort((a, b) => lag(b, true) - lag(a, true));
    const evictable = [...behind, ...waited];
    if (bytes(evictable.flat()) < over) return false;
    for (const holders of evictable) {
      if (this.inflightBytes + n <= limit) break;
      for (const holder of holders) holder.evict();
    }
    return true;
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
