// Admission by the places a front may hold in a model's queue and by expected wait, decided before
// a request's body is read: a request that could not finish before its deadline is refused at
// once (503 TILE_ERR_QUEUE_FULL, Retry-After from the estimate) rather than queued for a 504 later.
// Pure logic over what a front knows of each instance: the tiles it has in flight there and the
// worker's last report of its load and pace; the clock is injected so the fast tier can drive it.
import { isIdle, LOAD_KEEPALIVE_MS, type WorkerLoad } from '../ipc/protocol.js';

export type Clock = () => number;

/** One instance's backlog as a front sees it: the worker's last report (every answer carries
 *  one; the worker sends one every LOAD_REPORT_MS while busy, and idle every LOAD_KEEPALIVE_MS
 *  or when this front heard another), drained since at the worker's own recent pace (a full
 *  batch per batch time). */
export class Backlog {
  private report: WorkerLoad = { queued: 0, held: 0, batchMs: null, maxBatch: 1 };
  private at = 0;
  /** This front's tiles at the worker when the report came. */
  private mine = 0;

  constructor(private readonly clock: Clock) {}

  update(load: WorkerLoad, mine = 0): void {
    this.report = load;
    this.at = this.clock();
    this.mine = mine;
  }

  /** Tiles the worker holds at most (Infinity until it says). */
  get maxHeld(): number {
    return this.report.maxHeld ?? Infinity;
  }

  /** Recent milliseconds of one batch (null until the worker has run one), and its largest. */
  get batchMs(): number | null {
    return this.report.batchMs;
  }
  get maxBatch(): number {
    return this.report.maxBatch;
  }

  /** Tiles the other fronts hold at the worker, by a recent report (within two batch times, at
   *  least FRESH_MS, or IDLE_FRESH_MS for an idle worker's): what it held less this front's
   *  tiles there then. Null without one. */
  heldByOthers(): number | null {
    const { held, batchMs } = this.report;
    const fresh = isIdle(this.report) ? IDLE_FRESH_MS : Math.max(FRESH_MS, 2 * (batchMs ?? 0));
    if (this.at === 0 || this.clock() - this.at > fresh) return null;
    return Math.max(0, held - this.mine);
  }

  /** Tiles the worker holds now from every front, by its last report less what it ran since. */
  queued(): number {
    const { queued, batchMs, maxBatch } = this.report;
    if (!batchMs) return queued;
    return Math.max(0, queued - ((this.clock() - this.at) / batchMs) * maxBatch);
  }
}

/** How old a busy worker's report may be for a front to take room that other fronts leave unused
 *  (it reports every LOAD_REPORT_MS). A front with tiles at a worker has one with every answer. */
export const FRESH_MS = 250;
/** The same for an idle worker's report, which comes every LOAD_KEEPALIVE_MS unless it changes;
 *  the margin is for a busy event loop. A silent worker (hung) is trusted no longer than this. */
export const IDLE_FRESH_MS = LOAD_KEEPALIVE_MS + 250;

/** Tiles a front may hold past its share or the room the others leave, where there are several
 *  fronts. Their connections are balanced (connection-share.ts), so each runs at about its share,
 *  and its view of the others' tiles is a report old: at a concurrency equal to max_queue, a
 *  connection that moved from one front to another made the new one a tile over its places on
 *  reports that still counted it at the old one (4 fronts, max_queue 64, 64 connections:
 *  13-86 503s a 4 s run without slack, none with 2 tiles, one in a warm-up). The instances still refuse what passes
 *  their part of max_queue: at most fronts x ROOM_SLACK tiles are read and then refused. */
export const ROOM_SLACK = 2;

/** Places a front may hold in a model's queue: its share of max_queue, or, while every ready
 *  instance has reported recently, what the other fronts leave of max_queue by those reports,
 *  with `slack` tiles more; never more than the ready instances hold together (with one of two
 *  down, half of it).
 *  The kernel gives a connection to whichever front accepts first (supervisor/fronts.ts), so one
 *  front may carry most of a client's connections: with a fixed share, 64 connections to a
 *  model with room for 128 got thousands of 503s on an H200 (docs/gpu.md). Fronts that admit on
 *  the same reports may together send more than the queue has room for: the instances, each
 *  holding its part of max_queue, refuse the excess. */
export function places(share: number, maxQueue: number, instances: InstanceLoad[], slack = 0): number {
  if (instances.length === 0) return share + slack;
  let others: number | null = 0;
  let capacity = 0;
  for (const { backlog } of instances) {
    const held = backlog.heldByOthers();
    others = held === null || others === null ? null : others + held;
    capacity += backlog.maxHeld;
  }
  return Math.min(capacity, (others === null ? share : Math.max(share, maxQueue - others)) + slack);
}

export interface InstanceLoad {
  backlog: Backlog;
  /** This front's tiles sent there and not yet finished or dropped. */
  inflight: number;
}

export interface AdmissionInput {
  /** Places this front holds in the model's queue: tiles sent and not yet finished or dropped. */
  held: number;
  /** Tiles of requests admitted whose bodies are still arriving: no place yet, but ahead. */
  arriving: number;
  /** Places this front may hold in the model's queue (`places`). */
  places: number;
  timeoutMs: number;
  /** The model's ready instances. */
  instances: InstanceLoad[];
}

/** A request admitted while its body arrives: its tiles not yet sent, when it was admitted, and
 *  the share of its body that has come (1 when no length was declared: nothing tells otherwise). */
export interface Arrival {
  tiles: number;
  since: number;
  arrived(): number;
}

/** Tiles of requests whose bodies are arriving, as the estimate counts them ahead: each in the
 *  measure of its body that has come, so that uploads which stalled after their headers refuse no
 *  other client (64 stalled 16 MB uploads refused 129 of 267 requests in their first
 *  deadline-length when each counted whole), while a burst's bodies, here at once, count whole.
 *  An upload still arriving a deadline's length after it was admitted is a slow one and no longer
 *  counts. It takes its place when its body is complete; its worker judges then whether it can
 *  finish. */
export function arrivingTiles(arrivals: Iterable<Arrival>, now: number, timeoutMs: number): number {
  let tiles = 0;
  for (const arrival of arrivals) if (arrival.since > now - timeoutMs) tiles += arrival.tiles * arrival.arrived();
  return tiles;
}

export type Decision =
  | { admit: true }
  | { admit: false; reason: 'places' | 'wait'; waitMs: number; retryAfterS: number };

/** Milliseconds until a tile sent to this instance now would have its answer: the batches of
 *  the tiles ahead of it (the worker's report, or this front's own count when higher, plus its
 *  share of the requests admitted whose bodies are arriving), then its own. 0 for an idle instance (it always
 *  takes a tile: its worker judges it), null without a recent batch time. */
export function expectedMs(instance: InstanceLoad, unsentShare: number): number | null {
  const { backlog, inflight } = instance;
  if (backlog.batchMs === null) return null;
  const ahead = Math.max(backlog.queued(), inflight) + unsentShare;
  if (ahead < 1) return 0;
  return (Math.floor(ahead / backlog.maxBatch) + 1) * backlog.batchMs;
}

/** Whether a request may enter: within the places this front may hold, and able to finish on
 *  the least loaded instance before its deadline. An instance that has not run a batch yet has
 *  no estimate and admits (the places still bound it). */
export function decide({ held, arriving, places, timeoutMs, instances }: AdmissionInput): Decision {
  const unsentShare = arriving / Math.max(1, instances.length);
  let best = instances.length ? Infinity : 0;
  for (const instance of instances) best = Math.min(best, expectedMs(instance, unsentShare) ?? 0);
  if (held >= places) return { admit: false, reason: 'places', waitMs: best, retryAfterS: retryAfter(best, timeoutMs) };
  if (best > timeoutMs) return { admit: false, reason: 'wait', waitMs: best, retryAfterS: retryAfter(best, timeoutMs) };
  return { admit: true };
}

/** Whole seconds (at least 1) until the backlog has drained enough to take a request. */
function retryAfter(waitMs: number, timeoutMs: number): number {
  return Math.max(1, Math.ceil((waitMs - timeoutMs) / 1000));
}
