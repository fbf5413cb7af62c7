// What the supervisor tells a process it forks, through one environment variable each: an HTTP
// front (TILE_FRONT) and a model worker (TILE_WORKER). Both sides read and write it here.
import type { ModelEntry, ServiceConfig } from '../config/config.js';

export interface FrontConfig {
  service: ServiceConfig;
  /** This front's number, 0-based, and how many there are (a model's queue is shared out). */
  index: number;
  fronts: number;
}

export interface WorkerConfig {
  model: string;
  dir: string;
  intraOpThreads: number;
  /** Threads of the worker's libuv pool, where its PNG tiles are decoded (set as UV_THREADPOOL_SIZE
   *  at fork: the pool starts before any worker code runs). */
  decodeThreads: number;
  /** Largest batch; 0 means the manifest's batch.max (never more than it). */
  maxBatch: number;
  maxDelayMs: number;
  /** Tiles this instance holds at most, from every front: its part of the model's max_queue. */
  maxHeld: number;
  heartbeatMs: number;
  /** GPU id this worker is pinned to, or null for CPU; its PCI address ("0000:3b:00.0") and
   *  UUID when nvidia-smi listed it, for checking which Vulkan device webgpu would use. */
  gpu: string | null;
  gpuPci: string | null;
  gpuUuid: string | null;
  /** The model's provider setting and batch shapes setting. */
  provider: ModelEntry['provider'];
  batchShapes: ModelEntry['batch_shapes'];
  /** Where to listen for fronts. */
  socket: string;
  /** The service's data_dir, where the package's per-file sha256s are kept between loads. */
  dataDir: string;
}

const FRONT_VARIABLE = 'TILE_FRONT';
const WORKER_VARIABLE = 'TILE_WORKER';

export const frontEnv = (config: FrontConfig) => ({ [FRONT_VARIABLE]: JSON.stringify(config) });
export const workerEnv = (config: WorkerConfig) => ({ [WORKER_VARIABLE]: JSON.stringify(config) });

function read<T>(variable: string): T {
  const text = process.env[variable];
  if (!text) throw new Error(`${variable} is not set: this process is forked by the supervisor (npm start)`);
  return JSON.parse(text) as T;
}

export const readFrontConfig = () => read<FrontConfig>(FRONT_VARIABLE);
export const readWorkerConfig = () => read<WorkerConfig>(WORKER_VARIABLE);
