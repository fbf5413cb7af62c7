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

export type { FieldError, WireError };

/** One line of the usage log (the supervisor writes it; fronts report their requests). */
export interface UsageEntry {
  timestamp: string;
  model: string;
  endpoint: 'predict' | 'embed';
  mode: string;
  status: number;
  duration_ms: number;
  tile: string;
}

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
  /** Where the request held it (["body", "image_data"] or ["body"]), for the worker's errors. */
  loc: string[];
}

/** Milliseconds spent per stage in the worker, for the benchmark's breakdown. */
export interface StageTimes {
  /** PNG to pixels. */
  decode: number;
  /** This tile's share of writing the batch tensor. */
  preprocess: number;
  /** Wait in the batch queue before its batch started. */
  queue: number;
  /** session.run wall time of the whole batch. */
  inference: number;
  /** Everything in the worker, from receiving the job to answering it. */
  worker: number;
}

export interface WorkerInfo {
  pid: number;
  model: string;
  sha256: string;
  manifest: Manifest;
  provider: 'cuda' | 'cpu';
  /** Why CUDA was not used although a GPU was assigned. */
  providerWarning: string | null;
  cudaVisibleDevices: string | null;
  onnxruntime: string;
  intraOpThreads: number;
  loadMs: number;
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
  | { type: 'load-failed'; reason: string; packageFault: boolean; code: ErrorCode | null }
  | { type: 'heartbeat' }
  | { type: 'probe'; id: number; data: Record<string, unknown> }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; msg: string };

// ── HTTP front ⇄ model worker (Unix socket channel) ──

export type ChannelRequest = { type: 'infer'; id: number; job: TileJob };

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
};

export type ChannelReply = InferResult | { type: 'error'; id: number; error: WireError };

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
   *  OOM killer): its requests in flight were innocent and may be retried on another instance. */
  | { type: 'worker-exit'; pid: number; external: boolean }
  /** Report not ready, keep serving: the balancer takes the host out before it stops. */
  | { type: 'drain' }
  /** Stop accepting, finish what is in flight, exit. */
  | { type: 'stop' }
  | { type: 'reply'; id: number; data: unknown };

export type FrontQuery = { query: 'diagnostics'; categories: string[] } | { query: 'metrics' };

export type FromFront =
  /** The front listens for messages: it needs the current states. */
  | { type: 'hello' }
  /** The front accepts connections. */
  | { type: 'listening' }
  | { type: 'usage'; entries: UsageReport[] }
  | ({ type: 'query'; id: number } & FrontQuery);
