// The one contract between the service's processes: every message, each link a discriminated
// union on `type`.
//
//   primary (supervisor) ── process IPC ──▶ model worker   WorkerControl / WorkerReport
//   primary (supervisor) ── cluster IPC ──▶ HTTP front     ToFront / FromFront
//   HTTP front ─────────── Unix socket ───▶ model worker   ChannelRequest / ChannelReply
//
// Tile bytes travel only on the last link: the primary owns life cycles and states, never data.
// Messages cross with v8 serialization (advanced IPC, src/ipc/channel.ts), so typed arrays and
// Buffers cross as bytes.
import type { Manifest, Task } from '../model-package/manifest.js';
import type { ErrorCode, FieldError, WireError } from '../lib/errors.js';
import type { ProviderName } from '../config/config.js';
import type { VulkanDevice } from '../gpu/vulkan.js';

export type { FieldError, WireError };

/** One line of the usage log (the supervisor writes it; fronts report their requests). */
export interface UsageEntry {
  timestamp: string;
  model: string;
  /** v2: an Open Inference Protocol infer request over REST (its tiles in `tile`: NxHxW); grpc:
   *  over gRPC (ModelInfer). */
  endpoint: 'predict' | 'embed' | 'v2' | 'grpc';
  mode: string;
  status: number;
  duration_ms: number;
  tile: string;
  /** How the request ended when it was shed: its deadline passed (504), its client left before
   *  the answer, or it was refused at admission (503 queue full); absent otherwise. */
  shed?: ShedOutcome;
  /** Worker milliseconds of a served tile: waiting (queue), and its batch's run (compute). */
  queue_ms?: number;
  compute_ms?: number;
}

export type ShedOutcome = 'expired' | 'cancelled' | 'refused' | 'evicted';

export interface TileJob {
  task: Task;
  /** prediction_with_embedding: also return the embedding of the same forward pass. */
  withEmbedding: boolean;
  image: TileJobImage;
  width: number;
  height: number;
  bulk: number[] | null;
}

/** A tile's image as the front received it: PNG bytes (any base64 decoded), or raw uint8 RGB
 *  pixels, row-major, width x height x 3 bytes (no decoding at all). */
export interface TileJobImage {
  format: 'png' | 'rgb';
  bytes: Uint8Array;
  /** Where the request held it (["body", "image_data"] or ["body"]): the front's, for the 422
   *  items it writes of a DecodeFailure. */
  loc: string[];
}

/** Why a worker could not turn a tile's image into pixels; the front alone words it as a 422
 *  item (src/front/decode-failure.ts). */
export type DecodeFailure =
  | { kind: 'rgb-length'; expected: number; got: number }
  | { kind: 'png-undecodable'; reason: string }
  | { kind: 'png-size'; width: number; height: number; expectedWidth: number; expectedHeight: number };

/** Milliseconds spent per stage in the worker, for the benchmark's breakdown. */
export interface StageTimes {
  /** PNG to pixels. */
  decode: number;
  /** This tile's share of writing the batch tensor. */
  preprocess: number;
  /** Wait in the worker, from receiving the job to its batch's start (Triton's queue_duration). */
  queue: number;
  /** session.run wall time of the whole batch (Triton's compute_infer_duration). */
  inference: number;
  /** Everything in the worker, from receiving the job to answering it. */
  worker: number;
}

/** An execution provider a worker passed over, and why. */
export interface SkippedProvider {
  provider: ProviderName;
  reason: string;
}

/** One batch shape run at warm-up: its time (the first run: kernel compilation shows here) and
 *  whether a probe tile's outputs were byte for byte the largest batch's. */
export interface ShapeCheck {
  batch: number;
  ms: number;
  identical: boolean;
  /** How they differed, when they did. */
  difference?: string;
}

/** What warm-up found: the shapes batches are padded to, and each shape checked. */
export interface WarmupReport {
  shapes: number[];
  checks: ShapeCheck[];
  /** The largest batch gave the same bytes twice (checked on GPU providers; cpu's kernels do). */
  deterministic: boolean;
  /** A tile's outputs do not depend on what else is in its batch. */
  batchIndependent: boolean;
  /** Why not, or why batches are of one tile, when the checks say so. */
  note: string | null;
}

export interface WorkerInfo {
  pid: number;
  model: string;
  sha256: string;
  manifest: Manifest;
  provider: ProviderName;
  /** Providers tried before it, and why each was passed over. */
  providerSkipped: SkippedProvider[];
  /** The Vulkan device webgpu runs on, when the probe could tell. */
  adapter: VulkanDevice | null;
  cudaVisibleDevices: string | null;
  onnxruntime: string;
  intraOpThreads: number;
  /** From fork to ready; of it, creating the session and the warm-up. */
  loadMs: number;
  sessionMs: number;
  warmup: WarmupReport;
  /** The Unix socket fronts connect to for tiles. */
  socket: string;
}

// ── primary ⇄ model worker (process IPC) ──

export type WorkerControl = { type: 'probe'; id: number } | { type: 'stop' };

export type WorkerReport =
  | { type: 'ready'; info: WorkerInfo }
  /** `packageFault`: the package itself cannot load (manifest, graph, signature): retrying the
   *  same files cannot help, so the model is `failed` rather than restarted at once. `code`: the
   *  error's (TILE_ERR_PACKAGE_*, TILE_ERR_MODEL_LOAD), null for an error without one. */
  | { type: 'load-failed'; reason: string; packageFault: boolean; code: ErrorCode }
  | { type: 'heartbeat' }
  /** A run failed with a device error: the worker stops serving and exits to be restarted. */
  | { type: 'device-fault'; reason: string }
  | { type: 'probe'; id: number; data: Record<string, unknown> }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; msg: string };

// ── HTTP front ⇄ model worker (Unix socket channel) ──

export type ChannelRequest =
  /** A request's tiles (one, or an Open Inference Protocol batch), each with its own id and
   *  answered on its own once run or dropped. `deadline`: when the answers are no longer wanted,
   *  in ms since the epoch (Date.now(); fronts and workers share the host's clock). A tile not
   *  started by then is dropped, never run. */
  | { type: 'infer'; tiles: { id: number; job: TileJob }[]; deadline: number }
  /** The clients of these requests left: drop their tiles if they have not run. One message
   *  carries every cancellation of a short while. */
  | { type: 'cancel'; ids: number[] };

/** Why a worker dropped a tile without running it. */
export type DropReason = 'expired' | 'cancelled';

/** How often a worker sends its load to the fronts while busy, or to a front that heard another. */
export const LOAD_REPORT_MS = 100;
/** How often an idle worker sends a load its fronts heard already: a front trusts an idle
 *  report this old (and a margin: front/admission.ts IDLE_FRESH_MS), since a change would have
 *  come within LOAD_REPORT_MS (src/worker/load-reports.ts). */
export const LOAD_KEEPALIVE_MS = 1000;

/** What a worker says of its queue with each answer, for the fronts' admission. */
export interface WorkerLoad {
  /** Tiles waiting for a batch (undecoded, decoding or queued), from every front. */
  queued: number;
  /** Tiles it holds from every front: accepted and not yet answered (waiting or running). */
  held: number;
  /** Tiles it holds at most, its part of max_queue; absent when unbounded. */
  maxHeld?: number;
  /** Recent milliseconds of one batch (preprocess and session.run), or null before the first. */
  batchMs: number | null;
  /** The largest batch it runs. */
  maxBatch: number;
}

/** A worker with no tile: it reports only a change or the keepalive, and its fronts trust that
 *  report for longer (front/admission.ts IDLE_FRESH_MS). */
export const isIdle = (load: WorkerLoad): boolean => load.queued === 0 && load.held === 0;

/** A prediction or embedding as numbers, whatever the model's output dtype. */
export type Numbers = Float32Array | Float64Array;

/** The answer tagged with its role: the front writes it by role, not by array type. */
export type TileOutput = { role: 'mask'; mask: Uint8Array } | { role: 'prediction' | 'embedding'; values: Numbers };

export type InferResult = {
  type: 'result';
  id: number;
  output: TileOutput;
  embedding: Numbers | null;
  /** Fraction of tissue in a segmentation mask. */
  tissueFraction: number | null;
  batchSize: number;
  times: StageTimes;
  /** The package digest of the model that answered: a front tells its client (x-model-sha256),
   *  whose run can then tell answers of another version from its own. */
  sha256: string;
  load: WorkerLoad;
};

/** What a worker sends a front: an answer to one of its tiles, or the worker's load alone
 *  (src/worker/load-reports.ts). */
export type WorkerMessage = ChannelReply | { type: 'load'; load: WorkerLoad };

export type ChannelReply =
  | InferResult
  | { type: 'error'; id: number; error: WireError; load: WorkerLoad }
  /** The tile's image could not be decoded: a 422 the front words. */
  | { type: 'undecodable'; id: number; failure: DecodeFailure; load: WorkerLoad }
  /** The tile was dropped before it ran: its deadline passed, or its client left. */
  | { type: 'dropped'; id: number; reason: DropReason; load: WorkerLoad };

// ── primary ⇄ HTTP front (cluster IPC) ──

export type ModelState = 'loading' | 'ready' | 'failed' | 'stopped';
export type InstanceState = 'loading' | 'ready' | 'failed' | 'restarting' | 'stopping' | 'stopped';

export interface InstanceView {
  id: string;
  pid: number | null;
  state: InstanceState;
  /** Where a ready instance takes tiles. */
  socket: string | null;
  restarts: number;
  gpu: string | null;
  /** From the instance's last load (null before its first). */
  provider: ProviderName | null;
  providerSkipped: SkippedProvider[];
  adapter: VulkanDevice | null;
  loadMs: number | null;
  warmup: WarmupReport | null;
  lastError: string | null;
}

/** A model as every front sees it: enough to route, answer states and write metadata. */
export interface ModelView {
  name: string;
  state: ModelState;
  /** Why the model is `failed`. */
  reason: string | null;
  /** From a ready instance; null before the first load. */
  info: WorkerInfo | null;
  instances: InstanceView[];
}

/** A usage entry as a front reports it; the slide name stays in memory for scrubbing only. */
export type UsageReport = UsageEntry & { slide: string | null };

export type ToFront =
  | { type: 'models'; models: ModelView[] }
  /** A worker exited. `external`: killed by a signal the service did not send (an operator, the
   *  OOM killer), or stopped after a device fault: its requests in flight were innocent and may
   *  be retried on another instance. */
  | { type: 'worker-exit'; pid: number; external: boolean }
  /** Report not ready, keep serving: the balancer takes the host out before it stops. */
  | { type: 'drain' }
  /** Stop accepting, finish what is in flight, exit. */
  | { type: 'stop' }
  /** Reopen LOG_FILE: logrotate moved it and signalled the supervisor alone. */
  | { type: 'reopen-log' }
  | { type: 'reply'; id: number; data: unknown }
  /** Every front's open HTTP connections together, and how many fronts listen
   *  (src/front/connection-share.ts). */
  | { type: 'connections'; total: number; fronts: number };

export type FrontQuery = { query: 'diagnostics'; categories: string[] } | { query: 'metrics' };

export type FromFront =
  /** The front listens for messages: it needs the current states. */
  | { type: 'hello' }
  /** The front accepts connections. */
  | { type: 'listening' }
  | { type: 'usage'; entries: UsageReport[] }
  /** The front's open HTTP connections, when they changed (at most every CONNECTIONS_REPORT_MS). */
  | { type: 'connections'; open: number }
  | ({ type: 'query'; id: number } & FrontQuery);

/** Most often a front reports its open connections, and the supervisor sends their sum. */
export const CONNECTIONS_REPORT_MS = 100;
