// An HTTP front's way to the models: the states the supervisor sends, one socket channel per
// ready worker instance, least-outstanding routing, admission (this front's share of each model's
// queue and the expected wait: admission.ts), a bound on the request bytes it holds, deadlines
// that travel with each tile, cancellation, and the one retry on another instance.
import { connect } from 'node:net';
import type { Registry } from 'prom-client';
import type { ServiceConfig } from '../config/config.js';
import { Channel } from '../ipc/channel.js';
import type {
  ChannelReply,
  ChannelRequest,
  DecodeFailure,
  FromFront,
  FrontQuery,
  InferResult,
  ModelView,
  TileJob,
  ToFront,
  UsageReport,
} from '../ipc/protocol.js';
import { RequestReply } from '../ipc/request-reply.js';
import { errors, ServiceError } from '../lib/errors.js';
import { unavailable, type InferOptions, type ModelBackend, type Ticket, type Upload } from './backend.js';
import { arrivingTiles, Backlog, decide, type Arrival } from './admission.js';
import { decodeFailureItem } from './decode-failure.js';

/** How long requests of a closed channel wait for the supervisor to say why their worker died. */
const EXIT_NEWS_MS = 1000;
/** How long usage entries wait to share a message to the supervisor; a front killed outright
 *  loses at most this much of the usage log. */
const USAGE_BATCH_MS = 50;
/** Worker exits remembered for channels that close after the news arrives. */
const EXITS_KEPT = 256;

/** The request never reached a worker: another instance may take it. */
class NotSent extends Error {}
/** The worker died with the request in flight; `external` when it was killed from outside. */
class WorkerLost extends Error {
  constructor(readonly external: boolean) {
    super(external ? 'worker killed from outside' : 'worker died');
  }
}

/** How long cancellations wait to share one message to a worker. */
const CANCEL_BATCH_MS = 5;

/** One front's channel to one worker process. */
class WorkerLink {
  /** Answers awaited, each with its deadline's timer. */
  readonly requests = new RequestReply<InferResult>();
  /** Tiles sent and not yet finished or dropped by the worker (answered or not), each with what
   *  lets go of its place in the queue. */
  private readonly inWorker = new Map<number, () => void>();
  readonly backlog = new Backlog(Date.now);
  connected = false;
  private retired = false;
  private cancels: number[] = [];

  constructor(
    readonly pid: number,
    readonly channel: Channel<ChannelReply, ChannelRequest>,
  ) {
    channel.socket.once('connect', () => (this.connected = true));
    channel.on('message', (m) => {
      this.backlog.update(m.load);
      this.requests.settle(
        m.id,
        m.type === 'result'
          ? m
          : m.type === 'error'
            ? ServiceError.fromWire(m.error)
            : m.type === 'undecodable'
              ? new Undecodable(m.failure)
              : m.reason === 'expired'
                ? new Expired()
                : errors.cancelled(),
      );
      this.done(m.id);
    });
  }

  /** Tiles of this front the worker holds. */
  get inflight(): number {
    return this.inWorker.size;
  }

  /** Sends a request's tiles as one message, once `hold` has given each a place in the queue
   *  (all or none: otherwise each answer is why not); a tile's place is let go once the worker
   *  has finished or dropped it (or died). One answer per tile, in order. */
  infer(jobs: TileJob[], deadline: number, hold: () => () => void, signal?: AbortSignal): Promise<InferResult>[] {
    if (!this.channel.isOpen) return jobs.map(() => Promise.reject(new NotSent()));
    const places: (() => void)[] = [];
    try {
      for (let i = 0; i < jobs.length; i++) places.push(hold());
    } catch (err) {
      for (const letGo of places) letGo();
      return jobs.map(() => Promise.reject(err as Error));
    }
    const ms = Math.max(1, deadline - Date.now());
    const tiles: { id: number; job: TileJob }[] = [];
    const answers = jobs.map((job, i) =>
      this.requests.request(
        (id) => {
          tiles.push({ id, job });
          this.inWorker.set(id, places[i]!);
          signal?.addEventListener('abort', () => this.cancel(id), { once: true });
        },
        { ms, error: () => new Expired() },
      ),
    );
    try {
      this.channel.send({ type: 'infer', tiles, deadline });
    } catch (err) {
      for (const { id } of tiles) {
        this.requests.settle(id, err as Error);
        this.done(id);
      }
    }
    return answers;
  }

  /** Every tile still held is let go: the channel closed, so the worker holds none of them. */
  releaseAll(): void {
    for (const id of [...this.inWorker.keys()]) this.done(id);
  }

  /** The instance is no longer ready (a reload replaced it, or it stops): no new request goes to
   *  it, and once the worker is done with this front's tiles the channel closes, which is what a
   *  stopping worker waits for before it exits. */
  retire(): void {
    this.retired = true;
    this.hangUpWhenDone();
  }

  /** The client left: the worker drops the tile if it has not run (one message for the
   *  cancellations of a few milliseconds). */
  private cancel(id: number): void {
    if (!this.inWorker.has(id)) return;
    if (this.cancels.push(id) > 1) return;
    setTimeout(() => {
      const ids = this.cancels.filter((i) => this.inWorker.has(i));
      this.cancels = [];
      if (ids.length && this.channel.isOpen) this.channel.send({ type: 'cancel', ids });
    }, CANCEL_BATCH_MS);
  }

  private done(id: number): void {
    const letGo = this.inWorker.get(id);
    if (!letGo) return;
    this.inWorker.delete(id);
    letGo();
    this.hangUpWhenDone();
  }

  private hangUpWhenDone(): void {
    if (this.retired && this.inWorker.size === 0 && this.requests.size === 0) this.channel.close();
  }
}

/** No answer by the deadline: the front's timer, or the worker dropped the tile (its deadline
 *  passed, or its batch could not finish by it). */
class Expired extends Error {}
/** The worker could not decode the tile's image: a 422, worded here with where the image was. */
class Undecodable extends Error {
  constructor(readonly failure: DecodeFailure) {
    super(failure.kind);
  }
}

export class ModelClient implements ModelBackend {
  private views = new Map<string, ModelView>();
  private readonly links = new Map<number, WorkerLink>();
  /** Channels closed before the news of their worker's exit. */
  private readonly lostLinks = new Map<number, WorkerLink>();
  private readonly exits = new Map<number, boolean>();
  /** Per model: tiles sent to a worker and not yet finished or dropped there: its queue. */
  private readonly outstanding = new Map<string, number>();
  /** Per model: requests admitted whose body is still arriving, with the tiles each has not sent
   *  to a worker yet and when it was admitted. */
  private readonly arriving = new Map<string, Set<Arrival>>();
  /** Request bytes received and held by this front. */
  private inflightBytes = 0;
  private readonly queries = new RequestReply<unknown>();
  private usageBatch: UsageReport[] = [];
  private usageTimer: NodeJS.Timeout | undefined;
  draining = false;

  constructor(
    private readonly config: ServiceConfig,
    /** How many fronts share each model's queue. */
    private readonly fronts: number,
    /** Sends to the supervisor; `written` is called once the message has left this process. */
    private readonly send: (message: FromFront, written?: () => void) => void,
  ) {}

  /** Messages from the supervisor. */
  onMessage(message: ToFront): void {
    switch (message.type) {
      case 'models': {
        this.views = new Map(message.models.map((m) => [m.name, m]));
        const ready = new Set<number>();
        for (const m of message.models) {
          for (const i of m.instances) {
            if (i.state !== 'ready' || !i.socket || !i.pid) continue;
            ready.add(i.pid);
            if (!this.links.has(i.pid)) this.open(i.pid, i.socket);
          }
        }
        for (const [pid, link] of this.links) if (!ready.has(pid)) link.retire();
        return;
      }
      case 'worker-exit':
        this.exits.set(message.pid, message.external);
        if (this.exits.size > EXITS_KEPT) this.exits.delete(this.exits.keys().next().value!);
        this.lost(message.pid);
        return;
      case 'reply':
        this.queries.settle(message.id, message.data);
        return;
      case 'drain':
        this.draining = true;
        return;
    }
  }

  models(): ModelView[] {
    return [...this.views.values()];
  }

  model(name: string): ModelView | undefined {
    return this.views.get(name);
  }

  /** Requests this front holds for `model`. */
  queued(model: string): number {
    return this.outstanding.get(model) ?? 0;
  }

  admit(model: string, tiles = 1, upload?: Upload): Ticket {
    this.available(model);
    const entry = this.entry(model);
    const share = this.share(model);
    const held = this.queued(model);
    const decision = decide({
      held,
      arriving: arrivingTiles(this.arriving.get(model) ?? [], Date.now(), entry.request_timeout_ms) + tiles - 1,
      share,
      timeoutMs: entry.request_timeout_ms,
      instances: this.readyLinks(model).map((link) => ({ backlog: link.backlog, inflight: link.inflight })),
    });
    if (!decision.admit)
      throw errors.queueFull(
        model,
        decision.reason === 'share'
          ? `${share} requests outstanding on this front, its share of max_queue`
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
        if (this.queued(model) >= share)
          throw errors.queueFull(model, `${share} requests outstanding on this front, its share of max_queue`, 1);
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

  /** Runs a tile: a batch of one. */
  async infer(model: string, job: TileJob, options?: InferOptions): Promise<InferResult> {
    const [answer] = await this.inferBatch(model, [job], options);
    if (answer instanceof ServiceError) throw answer;
    return answer!;
  }

  /** Runs a request's tiles on the least loaded instance, sent as one message; each is dropped
   *  wherever it is once the deadline passes or `signal` aborts (the client left), and holds its
   *  own place of the ticket until the worker is done with it. Each tile's result or error, in
   *  order. */
  async inferBatch(
    model: string,
    jobs: TileJob[],
    { deadline = Date.now() + this.entry(model).request_timeout_ms, signal, ticket }: InferOptions = {},
  ): Promise<(InferResult | ServiceError)[]> {
    const hold = ticket ? () => ticket.hold() : () => () => {};
    const send = (link: WorkerLink, some: TileJob[]) => Promise.allSettled(link.infer(some, deadline, hold, signal));
    const first = this.pick(model);
    const settled = await send(first, jobs);
    // Once more on another instance, for the tiles that never reached the first one or whose
    // worker was killed from outside. A worker that died of a request itself is not given another.
    const again = settled.flatMap((s, i) => (s.status === 'rejected' && this.retryable(s.reason) ? [i] : []));
    if (again.length && Date.now() < deadline) {
      const retried = await Promise.resolve()
        .then(() =>
          send(
            this.pick(model, first),
            again.map((i) => jobs[i]!),
          ),
        )
        .catch((err: unknown) =>
          again.map((): PromiseSettledResult<InferResult> => ({ status: 'rejected', reason: err })),
        );
      again.forEach((i, k) => (settled[i] = retried[k]!));
    }
    return settled.map((s, i) => (s.status === 'fulfilled' ? s.value : this.answer(model, s.reason, jobs[i]!)));
  }

  diagnostics(categories: string[]): Promise<unknown> {
    return this.query({ query: 'diagnostics', categories });
  }

  /** The supervisor aggregates every front's registry (prom-client's AggregatorRegistry). */
  async metrics(_local: Registry): Promise<string> {
    return (await this.query({ query: 'metrics' })) as string;
  }

  /** Usage goes to the supervisor's one log in batches, each sent USAGE_BATCH_MS after its first
   *  entry: a message per turn of the event loop cost the supervisor 0.15 CPU ms per tile. */
  recordUsage(entry: UsageReport): void {
    if (this.usageBatch.push(entry) === 1) this.usageTimer = setTimeout(() => void this.flushUsage(), USAGE_BATCH_MS);
  }

  /** Sends the usage entries not sent yet: before a query (so /diagnostics on this front shows its
   *  own requests) and before the front exits, which waits until they have left the process. */
  flushUsage(): Promise<void> {
    clearTimeout(this.usageTimer);
    if (!this.usageBatch.length) return Promise.resolve();
    const entries = this.usageBatch;
    this.usageBatch = [];
    return new Promise((resolve) => this.send({ type: 'usage', entries }, resolve));
  }

  private query(query: FrontQuery): Promise<unknown> {
    void this.flushUsage();
    const ms = this.config.supervisor.probe_timeout_ms + 2000;
    return this.queries.request((id) => this.send({ type: 'query', id, ...query }), {
      ms,
      error: () => new Error(`the supervisor did not answer within ${ms} ms`),
    });
  }

  /** Each front may hold its share of the model's queue: together never more than max_queue. */
  private share(model: string): number {
    return Math.max(1, Math.ceil(this.entry(model).max_queue / this.fronts));
  }

  private entry(model: string) {
    return this.config.models.find((m) => m.name === model)!;
  }

  /** Throws what to answer when no instance of the model can take a request. */
  private available(model: string): void {
    const error = unavailable(model, this.views.get(model));
    if (error) throw error;
  }

  /** The open channels to the model's ready instances. */
  private readyLinks(model: string, exclude?: WorkerLink): WorkerLink[] {
    const links: WorkerLink[] = [];
    for (const instance of this.views.get(model)?.instances ?? []) {
      if (instance.state !== 'ready' || !instance.pid) continue;
      const link = this.links.get(instance.pid);
      if (link && link !== exclude && link.channel.isOpen) links.push(link);
    }
    return links;
  }

  /** The ready instance whose worker holds the fewest of this front's tiles. */
  private pick(model: string, exclude?: WorkerLink): WorkerLink {
    let best: WorkerLink | null = null;
    for (const link of this.readyLinks(model, exclude)) if (!best || link.inflight < best.inflight) best = link;
    if (best) return best;
    this.available(model);
    throw errors.modelLoading(model);
  }

  private retryable(err: unknown): boolean {
    // A worker's error says whether it ran the tile (one whose device failed did not).
    return (
      err instanceof NotSent ||
      (err instanceof WorkerLost && err.external) ||
      (err instanceof ServiceError && err.retryable)
    );
  }

  private answer(model: string, err: unknown, job: TileJob): ServiceError {
    if (err instanceof Undecodable) return errors.tileInvalid([decodeFailureItem(job.image.loc, err.failure)]);
    if (err instanceof NotSent || err instanceof WorkerLost)
      return errors.workerGone(`${model}: ${err.message} with the request in flight`);
    if (err instanceof Expired) return errors.deadline(model, this.entry(model).request_timeout_ms);
    return ServiceError.from(err);
  }

  private open(pid: number, path: string): void {
    const link = new WorkerLink(pid, new Channel<ChannelReply, ChannelRequest>(connect(path)));
    this.links.set(pid, link);
    link.channel.on('close', () => {
      if (this.links.get(pid) === link) this.links.delete(pid);
      // The worker holds nothing of this front's any more (answers still awaited learn why below).
      link.releaseAll();
      // Never connected: nothing reached the worker.
      if (!link.connected) return link.requests.rejectAll(() => new NotSent());
      if (this.exits.has(pid)) return this.lost(pid, link);
      this.lostLinks.set(pid, link);
      setTimeout(() => this.lost(pid), EXIT_NEWS_MS);
    });
  }

  /** Requests in flight on a dead worker's channel learn why it died. */
  private lost(pid: number, link = this.lostLinks.get(pid)): void {
    if (!link) return;
    this.lostLinks.delete(pid);
    const external = this.exits.get(pid) ?? false;
    link.requests.rejectAll(() => new WorkerLost(external));
  }
}
