// Service configuration: config/default.json (or CONFIG), overridden by PORT, HOST, MODELS,
// LOG_FILE and DATA_DIR. One TypeBox schema validates it and fills defaults.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { Type, type Static } from 'typebox';
import { Value } from 'typebox/value';

const ModelEntry = Type.Object({
  name: Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$' }),
  /** Package folder; default <model_repository>/<name>. */
  path: Type.Optional(Type.String()),
  instances: Type.Integer({ minimum: 1, default: 1 }),
  /** GPU ids to pin instances to (round-robin), or "auto" to use those nvidia-smi lists. */
  gpus: Type.Union([Type.Literal('auto'), Type.Array(Type.String())], { default: 'auto' }),
  /** ONNX Runtime intra-op threads per worker; default: every core (idle threads sleep). */
  intra_op_threads: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Largest batch; default the manifest's batch.max. */
  max_batch: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Wait for a batch to fill when the worker is idle; 0 (as Triton) runs at once, and batches
   *  still form from what arrives while a batch runs. */
  max_queue_delay_ms: Type.Number({ minimum: 0, default: 0 }),
  /** Requests outstanding for the model (all instances) before new ones get 503. */
  max_queue: Type.Integer({ minimum: 1, default: 64 }),
  request_timeout_ms: Type.Integer({ minimum: 1, default: 30000 }),
});

export const ServiceConfig = Type.Object({
  host: Type.String({ default: '127.0.0.1' }),
  port: Type.Integer({ minimum: 0, maximum: 65535, default: 8000 }),
  body_limit_bytes: Type.Integer({ minimum: 1024, default: 16 * 1024 * 1024 }),
  /** PNGs whose header declares more pixels than this are refused before inflating. */
  max_tile_pixels: Type.Integer({ minimum: 1, default: 4096 * 4096 }),
  model_repository: Type.String({ default: 'models' }),
  data_dir: Type.String({ default: 'data' }),
  log_file: Type.Union([Type.String(), Type.Null()], { default: null }),
  log_level: Type.String({ default: 'info' }),
  supervisor: Type.Object(
    {
      heartbeat_interval_ms: Type.Integer({ minimum: 10, default: 1000 }),
      heartbeat_timeout_ms: Type.Integer({ minimum: 100, default: 10000 }),
      /** Loading a model blocks the worker's event loop (ONNX Runtime parses the graph
       *  synchronously), so a loading worker gets this long instead of the heartbeat timeout. */
      load_timeout_ms: Type.Integer({ minimum: 100, default: 120000 }),
      restart_initial_delay_ms: Type.Integer({ minimum: 0, default: 100 }),
      restart_max_delay_ms: Type.Integer({ minimum: 0, default: 10000 }),
      /** A worker up this long has its backoff reset. */
      restart_reset_after_ms: Type.Integer({ minimum: 0, default: 60000 }),
      /** On SIGTERM, readiness reports 503 for this long before the front stops accepting, so a
       *  balancer's health checks see it first (HAProxy: inter + (fall - 1) x fastinter, with margin). */
      drain_delay_ms: Type.Integer({ minimum: 0, default: 5000 }),
      shutdown_grace_ms: Type.Integer({ minimum: 0, default: 10000 }),
      probe_timeout_ms: Type.Integer({ minimum: 1, default: 2000 }),
    },
    { default: {} },
  ),
  pressure: Type.Object(
    {
      max_event_loop_delay_ms: Type.Integer({ minimum: 0, default: 1000 }),
      max_heap_used_bytes: Type.Integer({ minimum: 0, default: 0 }),
      retry_after_s: Type.Integer({ minimum: 1, default: 2 }),
    },
    { default: {} },
  ),
  usage: Type.Object(
    {
      max_file_bytes: Type.Integer({ minimum: 1024, default: 10 * 1024 * 1024 }),
      recent_entries: Type.Integer({ minimum: 1, default: 200 }),
    },
    { default: {} },
  ),
  /** Optional bearer token for /diagnostics and /metrics; null leaves them open (bind to loopback). */
  admin_token: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
  models: Type.Array(ModelEntry),
});
export type ServiceConfig = Static<typeof ServiceConfig>;
export type ModelEntry = Static<typeof ModelEntry>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Reads and validates the configuration; relative paths resolve against `root`. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, root = process.cwd()): ServiceConfig {
  const file = resolve(root, env.CONFIG ?? 'config/default.json');
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`${file}: ${(err as Error).message}`);
  }
  if (env.PORT) raw.port = Number(env.PORT);
  if (env.HOST) raw.host = env.HOST;
  if (env.LOG_FILE !== undefined) raw.log_file = env.LOG_FILE || null;
  if (env.DATA_DIR) raw.data_dir = env.DATA_DIR;
  if (env.ADMIN_TOKEN) raw.admin_token = env.ADMIN_TOKEN;
  const config = Value.Default(ServiceConfig, raw) as ServiceConfig;
  const errors = Value.Errors(ServiceConfig, config);
  if (errors.length) throw new ConfigError(`${file}: ${errors.map((e) => `${e.instancePath || '(root)'} ${e.message}`).join('; ')}`);

  if (env.MODELS !== undefined) {
    const wanted = env.MODELS.split(',').map((s) => s.trim()).filter(Boolean);
    const unknown = wanted.filter((name) => !config.models.some((m) => m.name === name));
    if (unknown.length) throw new ConfigError(`MODELS names ${unknown.join(', ')}, not in ${file} (has ${config.models.map((m) => m.name).join(', ')})`);
    config.models = config.models.filter((m) => wanted.includes(m.name));
  }
  config.model_repository = resolve(root, config.model_repository);
  config.data_dir = resolve(root, config.data_dir);
  if (config.log_file) config.log_file = resolve(root, config.log_file);
  for (const m of config.models) m.path = resolve(config.model_repository, m.path ?? m.name);
  return config;
}

/** Threads per worker when not configured: every core. A model busy alone (the common case:
 *  a pipeline runs one model over a slide) then uses the whole machine; ONNX Runtime's idle
 *  threads sleep (allow_spinning 0), so busy models sharing cores do not burn them. */
export const defaultIntraOpThreads = (): number => availableParallelism();
