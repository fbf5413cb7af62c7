// Service configuration: config/default.json (or CONFIG), overridden by PORT, HOST, MODELS,
// LOG_FILE, DATA_DIR, ADMIN_TOKEN and LOG_LEVEL. One TypeBox schema validates it and fills defaults.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { Type, type Static } from 'typebox';
import { Value } from 'typebox/value';
import { CodedError } from '../lib/errors.js';
import { MAX_BATCH } from '../lib/batch-bound.js';
import { MAX_TILE_SIDE } from '../lib/tile-bound.js';
import { describeErrors, fieldName, suggest, type ConfigCode, type ConfigProblem } from './config-errors.js';

/** Node runs a timer longer than this (2^31 - 1 ms, about 24.8 days) after 1 ms instead: every
 *  millisecond setting is bounded by it, and a sum of settings waited for is capped by timerMs. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
export const timerMs = (ms: number): number => Math.min(ms, MAX_TIMER_MS);
/** Worker processes (of one model) and front processes: far more than a host's GPUs or cores use,
 *  few enough that a stray zero cannot fork the host to death. */
const MAX_PROCESSES = 256;
/** Threads per worker pool: as decode_threads, a multiple of the largest hosts' cores. */
const MAX_THREADS = 1024;
/** A request body: a tile request carries a few tiles (a 4096x4096 RGBA PNG is at most 64 MiB),
 *  and gRPC's message limit (an int32) and V8's longest string (~512 MiB, a JSON body) end near
 *  here; 1e18 passed before and admitted bodies no front can hold. */
export const MAX_BODY_BYTES = 1024 ** 3;
/** Request bytes one front holds: far above the default 256 MiB and any host's need, and well
 *  under what a 64-bit Buffer or a sum of byte counts (exact to 2^53) can take. */
export const MAX_INFLIGHT_BYTES = 256 * 1024 ** 3;
/** Requests outstanding for a model: 2^20, more than any client keeps open (each holds a
 *  connection or a gRPC call, themselves bounded by the open-file limit and
 *  front.max_inflight_bytes); a bound for a value that sizes queues and shares. */
export const MAX_QUEUE = 2 ** 20;
/** Usage entries kept in memory for /diagnostics?categories=usage: each is a few hundred bytes
 *  in the supervisor's heap and in that answer, so 100,000 is tens of MB. */
export const MAX_RECENT_ENTRIES = 100_000;
/** A tile's pixels: a tile must be its model's size, whose side a manifest bounds at
 *  MAX_TILE_SIDE, so a PNG declaring more than MAX_TILE_SIDE^2 (2^28) is refused whatever the
 *  limit; a larger limit only let such headers past this check. */
export const MAX_TILE_PIXELS = MAX_TILE_SIDE ** 2;
/** Connections one front holds on a port: each is a file descriptor, and Linux's default
 *  fs.nr_open (2^20) caps a process's open-file limit, the default's source (connectionLimit). */
export const MAX_CONNECTIONS = 2 ** 20;
/** A front's used heap past which under-pressure answers 503: V8 takes any
 *  --max-old-space-size, but its default limit is ~4 GiB and a front's requests are mostly
 *  Buffers outside the heap, so 1 TiB is past any heap a host gives a front; 1e18 passed before. */
export const MAX_HEAP_USED_BYTES = 1024 ** 4;
/** Retry-After (seconds) on the fronts' 503s that do not reckon their own (pressure, a model
 *  loading; a full queue says when its backlog drains): an hour.
 *  A client stays away that long, so a larger value turns a moment's overload or a model's load
 *  (load_timeout_ms, 2 minutes by default) into hours with no requests; and a client that waits it
 *  as a Node timer (seconds * 1000 ms) past 2^31 - 1 ms (2,147,483 s) retries at once instead. */
export const MAX_RETRY_AFTER_S = 3600;
/** Usage log size before rotation: the supervisor reads usage.jsonl and usage.jsonl.1 whole at
 *  start for the recent entries, as strings, which V8 bounds at 2^29 - 24 characters (~512 MiB;
 *  past it they were lost without a word); 256 MiB leaves room for the split lines. */
export const MAX_USAGE_FILE_BYTES = 256 * 1024 ** 2;
/** A host setting: an IP address (v4, or v6 without brackets, a %zone allowed) or a host name;
 *  whether it resolves to an address of this machine is preflight's check. An empty host
 *  listened on every interface ("listening on http://:8000"). */
const HOST_PATTERN = '^[A-Za-z0-9._:%-]+$';
const UUID = '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}';
/** A model's GPU: nvidia-smi's index (CUDA_DEVICE_ORDER=PCI_BUS_ID makes it CUDA's too), its
 *  UUID, or a MIG device's as nvidia-smi -L prints it: "MIG-<uuid>", or with drivers before R470
 *  "MIG-GPU-<uuid>/<GPU instance>/<compute instance>". Each is what CUDA_VISIBLE_DEVICES takes
 *  (a PCI bus id is not). */
const GPU_PATTERN = `^(0|[1-9][0-9]{0,3}|GPU-${UUID}|MIG-${UUID}|MIG-GPU-${UUID}/(0|[1-9][0-9]{0,2})/(0|[1-9][0-9]{0,2}))$`;

const Provider = Type.Union([Type.Literal('cuda'), Type.Literal('webgpu'), Type.Literal('cpu')]);

const ModelEntry = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$' }),
    /** Package folder; default <model_repository>/<name>. */
    path: Type.Optional(Type.String()),
    instances: Type.Integer({ minimum: 1, maximum: MAX_PROCESSES, default: 1 }),
    /** GPU ids (or MIG devices) to pin instances to (round-robin), or "auto" to use the GPUs
     *  nvidia-smi lists. */
    gpus: Type.Union(
      [
        Type.Literal('auto'),
        Type.Array(
          Type.String({
            pattern: GPU_PATTERN,
            expected:
              'a GPU index as nvidia-smi numbers GPUs ("0", "1", ...), or a GPU or MIG device UUID as nvidia-smi -L prints it ("GPU-" or "MIG-" then 36 hex digits and dashes; before driver R470, MIG-GPU-<uuid>/<gi>/<ci>)',
          }),
        ),
      ],
      { default: 'auto' },
    ),
    /** Execution providers: "auto" (cuda when its libraries load, else webgpu on a GPU that is not
     *  a software rasterizer, else cpu), or the ones to try, in order. */
    provider: Type.Union([Type.Literal('auto'), Type.Array(Provider, { minItems: 1, uniqueItems: true })], {
      default: 'auto',
    }),
    /** Batch sizes a worker runs: each batch is padded up to one of them, so a tile's outputs do not
     *  depend on what else is in its batch. "auto": checked at warm-up; "any": no padding. */
    batch_shapes: Type.Union(
      [
        Type.Literal('auto'),
        Type.Literal('any'),
        Type.Array(Type.Integer({ minimum: 1, maximum: MAX_BATCH }), { minItems: 1, uniqueItems: true }),
      ],
      { default: 'auto' },
    ),
    /** ONNX Runtime intra-op threads per worker; default: the cores shared among the model's instances (idle threads sleep). */
    intra_op_threads: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_THREADS })),
    /** Threads decoding this model's PNG tiles in each worker (its libuv pool); default: every core. */
    decode_threads: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_THREADS })),
    /** Largest batch; default the manifest's batch.max. Bounded as that is: a list of sizes up to a
     *  billion took a worker's heap (an attack session). */
    max_batch: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_BATCH })),
    /** Wait for a batch to fill when the worker is idle; 0 (as Triton) runs at once, and batches
     *  still form from what arrives while a batch runs. */
    max_queue_delay_ms: Type.Number({ minimum: 0, maximum: MAX_TIMER_MS, default: 0 }),
    /** Requests outstanding for the model (all instances) before new ones get 503. */
    max_queue: Type.Integer({ minimum: 1, maximum: MAX_QUEUE, default: 64 }),
    request_timeout_ms: Type.Integer({ minimum: 1, maximum: MAX_TIMER_MS, default: 30000 }),
  },
  { additionalProperties: false },
);

export const ServiceConfig = Type.Object(
  {
    host: Type.String({
      pattern: HOST_PATTERN,
      default: '127.0.0.1',
      expected: 'an IP address or a host name of this machine (0.0.0.0 or :: for every interface)',
    }),
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8000 }),
    /** The Open Inference Protocol's gRPC service (inference.GRPCInferenceService) on this port,
     *  beside HTTP; null: off. */
    grpc_port: Type.Union([Type.Integer({ minimum: 0, maximum: 65535 }), Type.Null()], { default: null }),
    body_limit_bytes: Type.Integer({ minimum: 1024, maximum: MAX_BODY_BYTES, default: 16 * 1024 * 1024 }),
    /** PNGs whose header declares more pixels than this are refused before inflating. */
    max_tile_pixels: Type.Integer({ minimum: 1, maximum: MAX_TILE_PIXELS, default: 4096 * 4096 }),
    model_repository: Type.String({ default: 'models' }),
    data_dir: Type.String({ default: 'data' }),
    log_file: Type.Union([Type.String(), Type.Null()], { default: null }),
    /** pino's levels (env LOG_LEVEL). */
    log_level: Type.Union(
      [
        Type.Literal('fatal'),
        Type.Literal('error'),
        Type.Literal('warn'),
        Type.Literal('info'),
        Type.Literal('debug'),
        Type.Literal('trace'),
        Type.Literal('silent'),
      ],
      { default: 'info' },
    ),
    /** HTTP front processes sharing the port (node:cluster); 0 picks one per core, at most 4. */
    fronts: Type.Integer({ minimum: 0, maximum: MAX_PROCESSES, default: 0 }),
    front: Type.Object(
      {
        /** Connections one front holds at once; 0 derives it from the process's open-file limit. */
        max_connections: Type.Integer({ minimum: 0, maximum: MAX_CONNECTIONS, default: 0 }),
        /** Request bytes (bodies being read or waiting for their answer) one front holds at once:
         *  past it, new model requests get 503 before their body is read. */
        max_inflight_bytes: Type.Integer({ minimum: 1024, maximum: MAX_INFLIGHT_BYTES, default: 256 * 1024 * 1024 }),
        /** A client must send its headers within this time, and its whole request within
         *  body_timeout_ms, or the connection is closed (slow-loris). */
        headers_timeout_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 10000 }),
        body_timeout_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 60000 }),
        /** Keep-alive connections idle this long are closed. */
        keep_alive_timeout_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 72000 }),
      },
      { default: {}, additionalProperties: false },
    ),
    supervisor: Type.Object(
      {
        heartbeat_interval_ms: Type.Integer({ minimum: 10, maximum: MAX_TIMER_MS, default: 1000 }),
        heartbeat_timeout_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 10000 }),
        /** Loading a model blocks the worker's event loop (ONNX Runtime parses the graph
         *  synchronously), so a loading worker gets this long instead of the heartbeat timeout. */
        load_timeout_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 120000 }),
        restart_initial_delay_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 100 }),
        restart_max_delay_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 10000 }),
        /** A worker up this long has its backoff reset. */
        restart_reset_after_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 60000 }),
        /** On SIGTERM, readiness reports 503 for this long before the front stops accepting, so a
         *  balancer's health checks see it first (HAProxy: inter + (fall - 1) x fastinter, with margin). */
        drain_delay_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 5000 }),
        shutdown_grace_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 10000 }),
        probe_timeout_ms: Type.Integer({ minimum: 1, maximum: MAX_TIMER_MS, default: 2000 }),
        /** A model whose package cannot load is `failed`: tried again when its files change
         *  (checked every package_poll_ms), on SIGHUP, or after failed_retry_ms. */
        failed_retry_ms: Type.Integer({ minimum: 100, maximum: MAX_TIMER_MS, default: 300000 }),
        package_poll_ms: Type.Integer({ minimum: 10, maximum: MAX_TIMER_MS, default: 2000 }),
      },
      { default: {}, additionalProperties: false },
    ),
    pressure: Type.Object(
      {
        max_event_loop_delay_ms: Type.Integer({ minimum: 0, maximum: MAX_TIMER_MS, default: 1000 }),
        max_heap_used_bytes: Type.Integer({ minimum: 0, maximum: MAX_HEAP_USED_BYTES, default: 0 }),
        retry_after_s: Type.Integer({ minimum: 1, maximum: MAX_RETRY_AFTER_S, default: 2 }),
      },
      { default: {}, additionalProperties: false },
    ),
    usage: Type.Object(
      {
        max_file_bytes: Type.Integer({ minimum: 1024, maximum: MAX_USAGE_FILE_BYTES, default: 10 * 1024 * 1024 }),
        recent_entries: Type.Integer({ minimum: 1, maximum: MAX_RECENT_ENTRIES, default: 200 }),
      },
      { default: {}, additionalProperties: false },
    ),
    health: Type.Object(
      {
        /** As Triton's strict readiness: /health/ready is 503 while any model is failed. Off, a
         *  failed model is listed apart and the service is ready with the others. */
        strict_readiness: Type.Boolean({ default: true }),
      },
      { default: {}, additionalProperties: false },
    ),
    /** Optional bearer token for /diagnostics and /metrics; null leaves them open (bind to loopback). */
    admin_token: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    models: Type.Array(ModelEntry),
  },
  { additionalProperties: false },
);
export type ServiceConfig = Static<typeof ServiceConfig>;
export type ModelEntry = Static<typeof ModelEntry>;
export type ProviderName = Static<typeof Provider>;

/** A configuration a person must fix; its message is one line naming where, the value and what
 *  was expected, for every problem found; its code is the first problem's. */
export class ConfigError extends CodedError<ConfigCode> {
  override name = 'ConfigError';

  constructor(
    code: ConfigCode,
    message: string,
    readonly problems: ConfigProblem[] = [{ code, message }],
  ) {
    super(code, message);
  }

  static of(problems: ConfigProblem[]): ConfigError {
    return new ConfigError(problems[0].code, problems.map((p) => p.message).join('; '), problems);
  }
}

/** Settings an environment variable overrides, and the variable. */
const ENV_SETTINGS = {
  port: 'PORT',
  host: 'HOST',
  log_file: 'LOG_FILE',
  data_dir: 'DATA_DIR',
  admin_token: 'ADMIN_TOKEN',
  log_level: 'LOG_LEVEL',
} as const;

export const configFile = (env: NodeJS.ProcessEnv = process.env, root = process.cwd()): string =>
  resolve(root, env.CONFIG ?? 'config/default.json');

/** Where a setting (a dotted field name) comes from, for messages: "PORT" or "<file>: port". */
export function settingSource(field: string, env: NodeJS.ProcessEnv = process.env, root = process.cwd()): string {
  const variable = ENV_SETTINGS[field.split(/[.[]/)[0] as keyof typeof ENV_SETTINGS];
  return variable && env[variable] ? variable : `${configFile(env, root)}: ${field}`;
}

function parsePort(value: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) > 65535)
    throw new ConfigError(
      'TILE_ERR_CONFIG_VALUE',
      `PORT is ${JSON.stringify(value)}, expected an integer from 0 to 65535`,
    );
  return Number(value);
}

/** Reads and validates the configuration; relative paths resolve against `root`. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, root = process.cwd()): ServiceConfig {
  const file = configFile(env, root);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(
      'TILE_ERR_CONFIG_FILE',
      `${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file (set CONFIG to the configuration file)' : (err as Error).message}`,
    );
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new ConfigError('TILE_ERR_CONFIG_FILE', `${file}: expected a JSON object of settings`);
  if (env.PORT) raw.port = parsePort(env.PORT);
  if (env.HOST) raw.host = env.HOST;
  if (env.LOG_FILE !== undefined) raw.log_file = env.LOG_FILE || null;
  if (env.DATA_DIR) raw.data_dir = env.DATA_DIR;
  if (env.ADMIN_TOKEN) raw.admin_token = env.ADMIN_TOKEN;
  if (env.LOG_LEVEL) raw.log_level = env.LOG_LEVEL;
  const bodyLimitSet = raw.body_limit_bytes !== undefined;
  const config = Value.Default(ServiceConfig, raw) as ServiceConfig;
  const where = (path: string) => settingSource(fieldName(path) || '(root)', env, root);
  const problems = describeErrors(ServiceConfig, config, where);
  if (problems.length) throw ConfigError.of(problems);
  const { headers_timeout_ms: headers, body_timeout_ms: body } = config.front;
  // Node refuses a server whose headers may take longer than the whole request (the front died
  // at each start instead).
  if (headers > body)
    throw new ConfigError(
      'TILE_ERR_CONFIG_VALUE',
      `${where('/front/headers_timeout_ms')} is ${headers}, longer than front.body_timeout_ms (${body}), within which the whole request must arrive: expected at most ${body}`,
    );

  // A body's bytes are held against its front's budget as they arrive (front/queue-share.ts):
  // one larger than the budget could never be read whole, and its client was answered 503
  // TILE_ERR_FRONT_BUSY, "retry later", however often it retried, on an idle service.
  // Left to its default, the limit is the budget where that is smaller (a small host's config
  // that sets only the budget served every body within it before the rule below, and still does).
  const { max_inflight_bytes: budget } = config.front;
  if (!bodyLimitSet) config.body_limit_bytes = Math.min(config.body_limit_bytes, budget);
  const { body_limit_bytes: bodyLimit } = config;
  if (bodyLimit > budget)
    throw new ConfigError(
      'TILE_ERR_CONFIG_VALUE',
      `${where('/body_limit_bytes')} is ${bodyLimit}, more than front.max_inflight_bytes (${budget}), the request bytes a front holds at once, so a body that large could never be read: expected at most ${budget} (or a larger front.max_inflight_bytes)`,
    );

  // HTTP and gRPC each bind the port in every front: the same one passes the listen check (one
  // at a time) and then every front dies binding the second.
  if (config.grpc_port !== null && config.grpc_port !== 0 && config.grpc_port === config.port)
    throw new ConfigError(
      'TILE_ERR_CONFIG_VALUE',
      `${where('/grpc_port')} is ${config.grpc_port}, the same as ${where('/port')} (HTTP), expected another port (or null for no gRPC)`,
    );

  const names = config.models.map((m) => m.name);
  // A model's routes are declared once per front: a second entry of the same name killed every
  // front at start. (More workers for a model: its instances.)
  const twice = names.findIndex((name, i) => names.indexOf(name) !== i);
  if (twice !== -1)
    throw new ConfigError(
      'TILE_ERR_CONFIG_VALUE',
      `${where(`/models/${twice}/name`)} is ${JSON.stringify(names[twice])}, as is models[${names.indexOf(names[twice])}].name, expected each model listed once (more workers for a model: its instances)`,
    );
  if (env.MODELS !== undefined) {
    const wanted = env.MODELS.split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const unknown = wanted.filter((name) => !names.includes(name));
    if (unknown.length) {
      const hints = unknown.map((name) => suggest(name, names)).filter(Boolean);
      throw new ConfigError(
        'TILE_ERR_CONFIG_UNKNOWN_MODEL',
        `MODELS names ${unknown.join(', ')}, not in ${file}, expected some of ${names.join(', ')}${hints.length ? ` (did you mean ${hints.join(', ')}?)` : ''}`,
      );
    }
    if (wanted.length === 0)
      throw new ConfigError(
        'TILE_ERR_CONFIG_NO_MODELS',
        `MODELS is empty, so no model would be served, expected a comma-separated list of some of ${names.join(', ')}`,
      );
    config.models = config.models.filter((m) => wanted.includes(m.name));
  }
  if (config.models.length === 0)
    throw new ConfigError(
      'TILE_ERR_CONFIG_NO_MODELS',
      `${file}: models is [], so no model would be served, expected at least one entry such as {"name": "tissue-seg"}`,
    );
  config.model_repository = resolve(root, config.model_repository);
  config.data_dir = resolve(root, config.data_dir);
  if (config.log_file) config.log_file = resolve(root, config.log_file);
  for (const m of config.models) m.path = resolve(config.model_repository, m.path ?? m.name);
  return config;
}

/** Threads per worker when not configured: the cores shared among the model's instances. A model
 *  busy alone (the common case: a pipeline runs one model over a slide) then uses the whole
 *  machine; ONNX Runtime's idle threads sleep (allow_spinning 0), so busy models sharing cores do
 *  not burn them. Not more threads than that: with two instances of two threads on two cores,
 *  tiles decoded beside a batch took a core from one of its threads and every operator waited
 *  for the slower one (tile-embed ran ~1.7x slower per tile than alone). */
export const defaultIntraOpThreads = (instances: number): number =>
  Math.max(1, Math.floor(availableParallelism() / instances));

/** HTTP fronts when `fronts` is 0: one per core, at most 4. Measured (docs/throughput.md): a
 *  front spends 0.7-1.1 CPU ms on a 224 px tile and ~2 on a 512 px one, so 4 fronts feed about
 *  4,000 small tiles/s, more than a host's GPUs take; more fronts would only add memory. */
/** The enabled model's entry (callers name models the configuration enables). */
export const modelEntry = (config: ServiceConfig, name: string): ModelEntry =>
  config.models.find((m) => m.name === name)!;

export const frontCount = (config: ServiceConfig): number => config.fronts || Math.min(4, availableParallelism());
