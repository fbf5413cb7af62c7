// One front's channel to one worker process: a request's tiles sent as one message, each holding
// its place in the queue until the worker has finished or dropped it, the worker's answers (and
// its load report, which each carries) matched to them, cancellations batched, and a retired
// instance's channel hung up once the worker is done with this front's tiles.
import type { Channel } from '../ipc/channel.js';
import type { ChannelReply, ChannelRequest, InferResult, TileJob, WorkerMessage } from '../ipc/protocol.js';
import { RequestReply } from '../ipc/request-reply.js';
import { errors, ServiceError } from '../lib/errors.js';
import { Backlog } from './admission.js';
import { Expired, NotSent, Undecodable } from './tile-failures.js';

/** How long cancellations wait to share one message to a worker. */
const CANCEL_BATCH_MS = 5;

export class WorkerLink {
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
    readonly channel: Channel<WorkerMessage, ChannelRequest>,
  ) {
    channel.socket.once('connect', () => (this.connected = true));
    channel.on('message', (m) => {
      if (m.type !== 'load') this.answered(m);
      // After the answer's tile has left `inflight`, as it left the worker's count.
      this.backlog.update(m.load, this.inflight);
    });
  }

  private answered(m: ChannelReply): void {
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
