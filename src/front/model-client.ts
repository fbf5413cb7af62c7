// An HTTP front's way to the models: the states the supervisor sends, one socket channel per
// ready worker instance, least-outstanding routing, this front's share of each model's queue, a
// bound on the request bytes it holds, deadlines, and the one retry on another instance.
import { connect } from 'node:net';
import type { Registry } from 'prom-client';
import type { ServiceConfig } from '../config/config.js';
import { Channel } from '../ipc/channel.js';
import type { BatchResult, ChannelReply, ChannelRequest, FromFront, FrontQuery, InferResult, ModelView, TileJob, ToFront, UsageReport } from '../ipc/protocol.js';
import { RequestReply } from '../ipc/request-reply.js';
import { errors, ServiceError } from '../lib/errors.js';
import { unavailable, type ModelBackend } from './backend.js';

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

/** One front's channel to one worker process. */
class WorkerLink {
  readonly requests = new RequestReply<InferResult | BatchResult>();
  connected = false;
  private retired = false;

  constructor(
    readonly pid: number,
    readonly channel: Channel<ChannelReply, ChannelRequest>,
  ) {
    channel.socket.once('connect', () => (this.connected = true));
    channel.on('message', (m) => this.requests.settle(m.id, m.type === 'error' ? ServiceError.fromWire(m.error) : m));
  }

  infer(model: string, job: TileJob, timeoutMs: number): Promise<InferResult> {
    if (!this.channel.isOpen) return Promise.reject(new NotSent());
    return this.requests.request((id) => this.channel.send({ type: 'infer', id, job }), { ms: timeoutMs, error: () => errors.deadline(model, timeoutMs) }).finally(() => this.hangUpWhenDone()) as Promise<InferResult>;
  }

  /** A request's tiles as one message; the worker answers them together. */
  inferBatch(model: string, jobs: TileJob[], timeoutMs: number): Promise<BatchResult> {
    if (!this.channel.isOpen) return Promise.reject(new NotSent());
    return this.requests.request((id) => this.channel.send({ type: 'infer-batch', id, jobs }), { ms: timeoutMs, error: () => errors.deadline(model, timeoutMs) }).finally(() => this.hangUpWhenDone()) as Promise<BatchResult>;
  }

  /** The instance is no longer ready (a reload replaced it, or it stops): no new request goes to
   *  it, and once this front's requests there are answered the channel closes, which is what a
   *  stopping worker waits for before it exits. */
  retire(): void {
    this.retired = true;
    this.hangUpWhenDone();
  }

  private hangUpWhenDone(): void {
    if (this.retired && this.requests.size === 0) this.channel.close();
  }
}

export class ModelClient implements ModelBackend {
  private views = new Map<string, ModelView>();
  private readonly links = new Map<number, WorkerLink>();
  /** Channels closed before the news of their worker's exit. */
  private readonly lostLinks = new Map<number, WorkerLink>();
  private readonly exits = new Map<number, boolean>();
  private readonly outstanding = new Map<string, number>();
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

  admit(model: string, bytes: number): () => void {
    this.available(model);
    // Each front may hold its share of the model's queue: together never more than max_queue.
    const share = Math.max(1, Math.ceil(this.entry(model).max_queue / this.fronts));
    const held = this.queued(model);
    if (held >= share) throw errors.queueFull(model, share);
    const limit = this.config.front.max_inflight_bytes;
    if (this.inflightBytes + bytes > limit && this.inflightBytes > 0) throw errors.frontBusy(limit);
    this.outstanding.set(model, held + 1);
    this.inflightBytes += bytes;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.outstanding.set(model, this.queued(model) - 1);
      this.inflightBytes -= bytes;
    };
  }

  async infer(model: string, job: TileJob): Promise<InferResult> {
    const timeoutMs = this.entry(model).request_timeout_ms;
    const deadline = Date.now() + timeoutMs;
    const first = this.pick(model);
    try {
      return await first.infer(model, job, timeoutMs);
    } catch (err) {
      if (!this.retryable(err)) throw this.answer(model, err);
      // Once more on another instance: the request never reached the first one, or the first was
      // killed from outside. A worker that died of the request itself is not given another.
      const second = this.pick(model, first);
      return await second.infer(model, job, Math.max(1, deadline - Date.now())).catch((again) => {
        throw this.answer(model, again);
      });
    }
  }

  /** A request's tiles on one instance, as one message: each tile's result or error, in order.
   *  Deadline and retry as infer's. */
  async inferBatch(model: string, jobs: TileJob[]): Promise<BatchResult['results']> {
    const timeoutMs = this.entry(model).request_timeout_ms;
    const deadline = Date.now() + timeoutMs;
    const first = this.pick(model);
    const attempt = (link: WorkerLink) => link.inferBatch(model, jobs, Math.max(1, deadline - Date.now())).then((r) => r.results);
    return attempt(first).catch((err) => {
      if (!this.retryable(err)) throw this.answer(model, err);
      return attempt(this.pick(model, first)).catch((again) => {
        throw this.answer(model, again);
      });
    });
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
    return this.queries.request((id) => this.send({ type: 'query', id, ...query }), { ms, error: () => new Error(`the supervisor did not answer within ${ms} ms`) });
  }

  private entry(model: string) {
    return this.config.models.find((m) => m.name === model)!;
  }

  /** Throws what to answer when no instance of the model can take a request. */
  private available(model: string): void {
    const error = unavailable(model, this.views.get(model));
    if (error) throw error;
  }

  /** The ready instance with the fewest requests from this front. */
  private pick(model: string, exclude?: WorkerLink): WorkerLink {
    let best: WorkerLink | null = null;
    for (const instance of this.views.get(model)?.instances ?? []) {
      if (instance.state !== 'ready' || !instance.pid) continue;
      const link = this.links.get(instance.pid);
      if (!link || link === exclude || !link.channel.isOpen) continue;
      if (!best || link.requests.size < best.requests.size) best = link;
    }
    if (best) return best;
    this.available(model);
    throw errors.modelLoading(model);
  }

  private retryable(err: unknown): boolean {
    // WORKER_GONE from a worker: it did not run the tile (its device failed), so another may.
    return err instanceof NotSent || (err instanceof WorkerLost && err.external) || (err instanceof ServiceError && err.code === 'TILE_ERR_WORKER_GONE');
  }

  private answer(model: string, err: unknown): ServiceError {
    if (err instanceof NotSent || err instanceof WorkerLost) return errors.workerGone(`${model}: ${err.message} with the request in flight`);
    return ServiceError.from(err);
  }

  private open(pid: number, path: string): void {
    const link = new WorkerLink(pid, new Channel<ChannelReply, ChannelRequest>(connect(path)));
    this.links.set(pid, link);
    link.channel.on('close', () => {
      if (this.links.get(pid) === link) this.links.delete(pid);
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
