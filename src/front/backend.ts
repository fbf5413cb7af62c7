// What the HTTP app needs of the models behind it: their states, admission before a body is
// read, inference, and the supervisor's diagnostics, metrics and usage log. An HTTP front
// implements it over the supervisor's messages and the workers' sockets (src/front/model-client.ts);
// the in-process tests implement it over a fake model.
import type { Registry } from 'prom-client';
import type { InferResult, ModelView, TileJob, UsageReport } from '../ipc/protocol.js';
import { errors, type ServiceError } from '../lib/errors.js';

export interface ModelBackend {
  /** Every enabled model, as last reported by the supervisor. */
  models(): ModelView[];
  model(name: string): ModelView | undefined;
  /** Admits a request of `tiles` tiles (default 1) for `model`, before its body is read: throws
   *  the ServiceError to answer with (loading, failed, queue full, front busy), or returns its
   *  ticket, its place in the model's queue. `upload`: the body on its way, as far as it came. */
  admit(model: string, tiles?: number, upload?: Upload): Ticket;
  /** Bytes of a request that has not named its model yet (a gRPC message on its way), or of an
   *  answer, held against the front's budget. `control`: a call that asks no model (gRPC health
   *  and metadata), which may also use a reserve as large as the budget. `client`: how they are
   *  let go of when their client falls behind its pace (pace.ts) while others need the budget. */
  requestBytes(control?: boolean, client?: Evictable): RequestBytes;
  /** Tiles of `model` this front sent to workers and they have not finished or dropped. */
  queued(model: string): number;
  /** Runs a tile on an instance of `model`: the result, or a ServiceError. */
  infer(model: string, job: TileJob, options?: InferOptions): Promise<InferResult>;
  /** Runs a request's tiles, sent as one message to one instance (the Open Inference Protocol's
   *  batches); each tile keeps the deadline, cancellation and place of `infer`'s. Each tile's
   *  result or ServiceError, in order; a ServiceError thrown when none could be sent. */
  inferBatch(model: string, jobs: TileJob[], options?: InferOptions): Promise<(InferResult | ServiceError)[]>;
  /** Not ready while draining for a stop (a balancer takes the host out), still serving. */
  readonly draining: boolean;
  diagnostics(categories: string[]): Promise<unknown>;
  /** Prometheus text for the whole service; `local` holds this front's own metrics. */
  metrics(local: Registry): Promise<string>;
  recordUsage(entry: UsageReport): void;
}

/** A request body on its way: the bytes its Content-Length declares (none when chunked), and
 *  those that arrived but were not read yet (the rest of what arrived, the ticket counts as
 *  `received`). */
export interface Upload {
  declared?: number;
  buffered(): number;
  /** Resets its connection: an upload that falls behind its pace (pace.ts) while others need the
   *  budget. */
  abandon(): void;
  /** Its connection (Evictable.connection). */
  connection?: object;
}

/** Bytes a client holds and keeps going, which are let go of when it falls behind its pace
 *  (pace.ts) while others need the budget (queue-share.ts). */
export interface Evictable {
  /** Ends what holds them: resets the connection or the stream. */
  evict(): void;
  /** The pace it must keep, bytes a second: MIN_RATE (the default), or ANY_RATE. */
  rate?: number;
  /** What one reset ends: holders on one connection (an HTTP/1.1 answer, those queued behind it,
   *  a body arriving) are let go of together, when the one whose turn it is falls behind. */
  connection?: object;
  /** An answer queued behind another on its connection, waiting for its turn (not for its
   *  client): paced from RequestBytes.turn(); until then let go of only after every connection
   *  behind its pace, once it has waited WINDOW_MS. */
  queued?: boolean;
}

/** Request bytes held against the front's budget. */
export interface RequestBytes {
  /** `n` more bytes arrived; throws TILE_ERR_FRONT_BUSY past the front's budget. */
  received(n: number): void;
  /** `n` more bytes held whatever the budget: an answer already computed, waiting for its client
   *  to take it. Past the budget, requests are refused until it is taken, or until its client
   *  falls behind its pace and it is evicted. */
  held(n: number): void;
  /** `n` bytes of a held answer taken by its client: its pace (pace.ts). */
  taken(n: number): void;
  /** A queued answer's turn on its connection (Evictable.queued): its pace counts from now. */
  turn(): void;
  /** The bytes held so far. */
  bytes(): number;
  /** Gives them all back. */
  release(): void;
}

/** An admitted request: the body bytes it holds against the front's budget, and the places its
 *  tiles take in the model's queue once they go to a worker. */
export interface Ticket {
  /** `bytes` more of the body arrived; throws TILE_ERR_FRONT_BUSY past the front's budget. */
  received(bytes: number): void;
  /** The whole body has arrived: its bytes wait for the model now, not for the client. */
  arrived(): void;
  /** A tile goes to a worker: it takes a place in the queue (throws TILE_ERR_QUEUE_FULL past the
   *  front's share) until the returned function is called, when the worker is done with it. */
  hold(): () => void;
  /** The response is done (sent, or the client left): its bytes are given back. */
  release(): void;
}

export interface InferOptions {
  /** Date.now() after which the answer is not wanted: the tile is dropped wherever it is, never
   *  run late. Default: now plus the model's request_timeout_ms. */
  deadline?: number;
  /** Aborted when the client leaves: the tile is cancelled wherever it is. */
  signal?: AbortSignal;
  /** The request's place, held until the worker is done with the tile. */
  ticket?: Ticket;
  /** The bytes the tiles' images are (or are views of), which the caller reads no more: freed
   *  once every tile is answered with a result (free-bytes.ts). */
  spent?: Uint8Array;
}

/** Why a model cannot take a request now (failed to load, or still loading), or null when ready. */
export function unavailable(name: string, view: ModelView | undefined): ServiceError | null {
  if (view?.state === 'failed') return errors.modelFailed(name, view.reason ?? 'unknown');
  return view?.state === 'ready' ? null : errors.modelLoading(name);
}
