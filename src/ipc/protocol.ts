// The one contract between the supervisor and a worker process: every IPC message, both ways.
// Messages travel with `serialization: 'advanced'`, so typed arrays and Buffers cross as bytes.
import type { Manifest, Task } from '../model-package/manifest.js';

/** A validation failure in the spec's ValidationError shape, minus `input`. */
export interface FieldError {
  loc: (string | number)[];
  msg: string;
  type: string;
  ctx?: Record<string, unknown>;
}

export interface TileJob {
  task: Task;
  /** prediction_with_embedding: also return the embedding of the same forward pass. */
  withEmbedding: boolean;
  /** The tile's PNG bytes (the front has decoded the base64). */
  png: Uint8Array;
  width: number;
  height: number;
  bulk: number[] | null;
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
}

/** What the supervisor tells a worker at fork time, through the TILE_WORKER environment variable. */
export interface WorkerConfig {
  model: string;
  dir: string;
  intraOpThreads: number;
  /** Largest batch; 0 means the manifest's batch.max (never more than it). */
  maxBatch: number;
  maxDelayMs: number;
  heartbeatMs: number;
  /** GPU id this worker is pinned to, or null for CPU. */
  gpu: string | null;
}

export type SupervisorMessage =
  | { type: 'infer'; id: number; job: TileJob }
  | { type: 'probe'; id: number }
  | { type: 'stop' };

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

export type WorkerMessage =
  | { type: 'ready'; info: WorkerInfo }
  | { type: 'load-failed'; reason: string }
  | { type: 'heartbeat' }
  | InferResult
  | { type: 'invalid'; id: number; errors: FieldError[] }
  | { type: 'failed'; id: number; reason: string }
  | { type: 'probe'; id: number; data: Record<string, unknown> }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; msg: string };
