// Every error a user or operator can see, defined once: a stable code in fastify's FST_ERR_*
// style (TILE_ERR_<AREA>_<WHAT>) with what it means, and for the HTTP API's errors the status and
// the body the contract gives them (fastify's lib/errors.js is the model). Each error class of the
// service carries one of these codes: ServiceError here, ConfigError (src/config), PackageError
// (src/model-package), PngError (src/tile; its code is its rule's), and the whole-slide client's
// SlideError, TilePlanError, TileClientError and UsageError (src/client). docs/error-codes.md's
// table is this registry (test/shared/error-codes.ts holds them equal).
//
// ServiceErrors are thrown anywhere (front, worker, supervisor), cross process boundaries as
// { code, message, detail } and are turned into a response in one place
// (src/front/plugins/errors.ts), which also names the code in an x-error-code header.

/** A validation failure in the spec's ValidationError shape. */
export interface FieldError {
  loc: (string | number)[];
  msg: string;
  type: string;
  ctx?: Record<string, unknown>;
  input?: unknown;
}

/** How an error's body is written: the 422 list, the contract's loading state, a detail string,
 *  or the plain 500 whose reason stays in the log. */
type BodyKind = 'validation' | 'loading' | 'detail' | 'internal';

interface Entry {
  /** What happened and what to do, for README's table. */
  meaning: string;
}
interface HttpEntry extends Entry {
  status: number;
  body: BodyKind;
}

const REGISTRY = {
  // The HTTP API (ServiceError): the status and the contract's body.
  TILE_ERR_VALIDATION: {
    status: 422,
    body: 'validation',
    meaning:
      'The request fails a check (schema, tile size, resolution, bulk RNA, PNG): every field error in the 422 list.',
  },
  TILE_ERR_UNAUTHORIZED: {
    status: 401,
    body: 'detail',
    meaning: 'admin_token is set and /diagnostics or /metrics was asked without `Authorization: Bearer <token>`.',
  },
  TILE_ERR_NOT_FOUND: {
    status: 404,
    body: 'detail',
    meaning: 'No such route; under /api and /health/ready the answer names the enabled models.',
  },
  TILE_ERR_METHOD_NOT_ALLOWED: {
    status: 405,
    body: 'detail',
    meaning: 'The path exists for other methods, listed in the Allow header.',
  },
  TILE_ERR_EXPECTATION_FAILED: {
    status: 417,
    body: 'detail',
    meaning: 'An Expect header other than 100-continue, the one expectation HTTP defines.',
  },
  TILE_ERR_NOT_IMPLEMENTED: {
    status: 501,
    body: 'detail',
    meaning: 'CONNECT: the service is no proxy and opens no tunnel; the socket closes.',
  },
  TILE_ERR_NOT_ACCEPTABLE: {
    status: 406,
    body: 'detail',
    meaning: 'The Accept header admits no answer this request can have (a binary answer of two tensors).',
  },
  TILE_ERR_UNSUPPORTED_ENCODING: {
    status: 415,
    body: 'detail',
    meaning: 'A Content-Encoding (gzip, ...) other than identity: send the body uncompressed.',
  },
  TILE_ERR_HEADERS_TOO_LARGE: {
    status: 431,
    body: 'detail',
    meaning: "The request's headers, its URL included, are over Node's limit; the socket closes after the answer.",
  },
  TILE_ERR_REQUEST_TIMEOUT: {
    status: 408,
    body: 'detail',
    meaning: 'The request did not arrive within front.headers_timeout_ms or front.body_timeout_ms; the socket closes.',
  },
  TILE_ERR_BAD_REQUEST: {
    status: 400,
    body: 'detail',
    meaning: "HTTP that Node's parser refuses (malformed; the socket closes), or a path with a bad percent-escape.",
  },
  TILE_ERR_MODEL_LOADING: {
    status: 503,
    body: 'loading',
    meaning: 'No instance of the model is ready (starting, loading, restarting): retry after Retry-After.',
  },
  TILE_ERR_WORKER_GONE: {
    status: 503,
    body: 'loading',
    meaning: 'The worker process died with the request in flight; it restarts: retry.',
  },
  TILE_ERR_MODEL_FAILED: {
    status: 503,
    body: 'detail',
    meaning:
      "The model's package cannot load (the log has its TILE_ERR_PACKAGE_* or TILE_ERR_MODEL_LOAD code); retried when its files change, on SIGHUP, and slowly.",
  },
  TILE_ERR_QUEUE_FULL: {
    status: 503,
    body: 'detail',
    meaning:
      "Refused at once: the model's queue is full (the tiles this front may hold in it, or an instance's part of max_queue), or too long for the request to finish before request_timeout_ms; retry after Retry-After (from the expected wait).",
  },
  TILE_ERR_FRONT_BUSY: {
    status: 503,
    body: 'detail',
    meaning: 'The front holds front.max_inflight_bytes of requests, a bound on its memory: retry later.',
  },
  TILE_ERR_UNDER_PRESSURE: {
    status: 503,
    body: 'detail',
    meaning: "The front's event loop, heap or open files are past their limit (the pressure settings): retry later.",
  },
  TILE_ERR_SHUTTING_DOWN: {
    status: 503,
    body: 'detail',
    meaning: 'The service is draining for a stop: retry on another host or later.',
  },
  TILE_ERR_DEADLINE: {
    status: 504,
    body: 'detail',
    meaning: "No answer within the model's request_timeout_ms; the worker drops the tile if it has not run.",
  },
  TILE_ERR_CANCELLED: {
    status: 499,
    body: 'detail',
    meaning:
      'The client closed its connection before the answer (never sent; the status the usage log records): the tile is dropped if it has not run.',
  },
  TILE_ERR_CLIENT_TOO_SLOW: {
    status: 408,
    body: 'detail',
    meaning:
      "The client took its answer slower than 1 MiB/s, or sent nothing of its body for 5 s, while others needed the front's budget (front.max_inflight_bytes): its connection was reset (never sent; the status the usage log records).",
  },
  TILE_ERR_V2_INVALID: {
    status: 400,
    body: 'detail',
    meaning:
      'An Open Inference Protocol request (/v2, gRPC) fails a check: its JSON or binary framing, an input\'s name, datatype, shape or data, a tile rule; `{"error": ...}` names the input and what was expected (gRPC INVALID_ARGUMENT).',
  },
  TILE_ERR_INTERNAL: {
    status: 500,
    body: 'internal',
    meaning: 'session.run or another server part failed; the reason is in the log, not the answer.',
  },

  // Configuration and start (ConfigError): one line on stderr, exit status 2, nothing started.
  TILE_ERR_CONFIG_ARGS: { meaning: 'An unknown command-line option (the service takes --check-config and --help).' },
  TILE_ERR_CONFIG_FILE: {
    meaning:
      'The configuration file (CONFIG, default config/default.json) is missing, not JSON, or not an object of settings.',
  },
  TILE_ERR_CONFIG_UNKNOWN_KEY: {
    meaning: 'A setting that does not exist (a misspelling is answered with the likely name).',
  },
  TILE_ERR_CONFIG_MISSING_KEY: { meaning: 'A required setting is missing (a model entry without its name).' },
  TILE_ERR_CONFIG_VALUE: {
    meaning:
      "A setting's value (in the file or its environment variable) is not what it takes; the line names the expected values.",
  },
  TILE_ERR_CONFIG_UNKNOWN_MODEL: { meaning: 'MODELS names a model the configuration file does not list.' },
  TILE_ERR_CONFIG_NO_MODELS: { meaning: 'No model would be served: models is [] or MODELS is empty.' },
  TILE_ERR_LOG_FILE: {
    meaning:
      'log_file cannot be written after the start (its folder removed or replaced, the disk full, a folder where the file was): said once on stderr; the service serves on, every line still on stdout, and writes the file again once it can (SIGUSR2 reopens it).',
  },
  TILE_ERR_CONFIG_GPU: {
    meaning:
      "A model's gpus lists a GPU this host does not have (by nvidia-smi's indices and UUIDs, and the MIG devices nvidia-smi -L lists): a --check-config problem, and a warning in the log at start, where its workers see no GPU.",
  },
  TILE_ERR_CONFIG_HEAP_LIMIT: {
    meaning:
      "pressure.max_heap_used_bytes is above a front's V8 heap limit (heap_size_limit, with the fronts' V8 flags and NODE_OPTIONS): the heap never gets there, so it never sheds load; a warning in the log at start (front 0), not a refusal.",
  },
  TILE_ERR_CONFIG_PATH: {
    meaning:
      'log_file (LOG_FILE) or data_dir (DATA_DIR) cannot be written: a folder where a file goes, a file where a folder goes, or no permission.',
  },
  TILE_ERR_LISTEN_HOST: { meaning: 'HOST (or host) does not resolve, or is not an address of this machine.' },
  TILE_ERR_LISTEN_PORT_IN_USE: { meaning: 'PORT (or port) is in use by another process.' },
  TILE_ERR_LISTEN_PORT_DENIED: {
    meaning: 'PORT (or port) is below 1024 and the service lacks the privilege to bind it.',
  },
  TILE_ERR_LISTEN_FAILED: { meaning: 'The listen address cannot be bound for another reason, named on the line.' },

  // Model packages (PackageError) and loading them in a worker: the model is failed (503
  // TILE_ERR_MODEL_FAILED) and the log's "model failed to load" line carries the code;
  // --check-config and npm run package print it.
  TILE_ERR_PACKAGE_MANIFEST_UNREADABLE: { meaning: "The package's manifest.json is missing or not JSON." },
  TILE_ERR_PACKAGE_MANIFEST: {
    meaning:
      'manifest.json breaks its schema or a rule between its fields (name and folder, a task and its tensor, preprocess); the line names the field.',
  },
  TILE_ERR_PACKAGE_MODEL_UNREADABLE: { meaning: "The package's model.onnx is missing or unreadable." },
  TILE_ERR_PACKAGE_FILE_UNREADABLE: {
    meaning:
      'A file of the package cannot be read for its sha256, or a symlink in it leads nowhere or in a loop; the line names it.',
  },
  TILE_ERR_PACKAGE_GRAPH: {
    meaning:
      'The manifest does not fit the ONNX graph (a tensor name, type, shape, batch dimension or mask channel); the line names the field and the graph.',
  },
  TILE_ERR_PACKAGE_OUTPUT_SHAPE: {
    meaning:
      "At warm-up, an output's runtime shape does not fit its role (the graph's symbolic dimensions hid it at load).",
  },
  TILE_ERR_MODEL_LOAD: {
    meaning:
      'ONNX Runtime cannot load model.onnx (a corrupt graph, an unsupported operator, out of memory), or the load failed otherwise without a more precise code (a warm-up batch that cannot be allocated; a worker that died while loading, 3 times in a row): the reason, "load failed [CODE]: ...", always names a code.',
  },
  TILE_ERR_MODEL_NO_PROVIDER: {
    meaning:
      "No execution provider of the model's `provider` setting can run it here (/api/models and the log say why each was passed over): the model is failed.",
  },
  TILE_ERR_MODEL_DEVICE_FAULT: {
    meaning:
      'A run failed with a device error (a CUDA failure, out of memory, a lost device): the worker stops serving and is restarted; its queued tiles go to another instance.',
  },

  // GPU execution providers: --check-config's problems and `npm run cuda:install` (exit status 2).
  TILE_ERR_PROVIDER_CUDA_LIBRARIES: {
    meaning:
      "The CUDA provider libraries beside libonnxruntime are incomplete or from another ONNX Runtime version, or missing while a model's provider list is only cuda.",
  },
  TILE_ERR_PROVIDER_CUDA_PACKAGE: {
    meaning:
      'cuda:install was given a file that is not a CUDA provider package of the bundled ONNX Runtime version (missing, not a .nupkg, .whl or .tgz, without the libraries, another version): nothing installed.',
  },

  // PNG rules (PngError, src/tile/png-rules.ts; the code is the rule's name in capitals). Over
  // HTTP a refused PNG is a 422 whose msg names what is wrong.
  TILE_ERR_PNG_SIGNATURE: { meaning: 'The bytes do not start with the PNG signature.' },
  TILE_ERR_PNG_IHDR: {
    meaning: 'The IHDR chunk is not first, or a field of it (size, bit depth, colour type, methods) is not allowed.',
  },
  TILE_ERR_PNG_CHUNK_BOUNDS: { meaning: 'A chunk runs past the end of the file.' },
  TILE_ERR_PNG_CHUNK_TYPE: { meaning: 'A chunk type is not 4 ASCII letters.' },
  TILE_ERR_PNG_CRC: { meaning: "A chunk's CRC does not match its bytes." },
  TILE_ERR_PNG_SECOND_IHDR: { meaning: 'A second IHDR chunk.' },
  TILE_ERR_PNG_UNKNOWN_CRITICAL_CHUNK: { meaning: 'A critical chunk other than IHDR, PLTE, IDAT, IEND.' },
  TILE_ERR_PNG_PLTE: { meaning: 'A palette that is missing, repeated, misplaced, or of the wrong size.' },
  TILE_ERR_PNG_TRNS: { meaning: 'A tRNS chunk after the image data.' },
  TILE_ERR_PNG_IDAT_ORDER: { meaning: 'IDAT chunks that are not consecutive.' },
  TILE_ERR_PNG_NO_IDAT: { meaning: 'No image data (IDAT) chunk.' },
  TILE_ERR_PNG_NO_IEND: { meaning: 'No IEND chunk, or one that holds data.' },
  TILE_ERR_PNG_AFTER_IEND: { meaning: 'Bytes after the IEND chunk.' },
  TILE_ERR_PNG_ZLIB: { meaning: 'The image data is not a valid zlib stream (its Adler-32 included).' },
  TILE_ERR_PNG_SHORT_IMAGE_DATA: { meaning: 'The image data inflates to fewer bytes than the declared size needs.' },
  TILE_ERR_PNG_EXCESS_IMAGE_DATA: {
    meaning:
      'A decompression bomb: the image data inflates past the bytes the declared size needs (refused there), or the size needs more than a buffer holds.',
  },
  TILE_ERR_PNG_TRAILING_IMAGE_DATA: { meaning: 'Bytes after the end of the zlib stream in IDAT.' },

  // The whole-slide client, tile-infer: `tile-infer: [CODE] ...` on stderr; exit status 2 for
  // a wrong command line, 1 otherwise.
  TILE_ERR_CLIENT_USAGE: { meaning: 'A missing or invalid option or command of tile-infer.' },
  TILE_ERR_CLIENT_HTTP: {
    meaning: 'The service refused a request with a status that retrying will not change (4xx); the line has its body.',
  },
  TILE_ERR_CLIENT_DEADLINE: { meaning: 'A tile had no answer within --deadline, retries included.' },
  TILE_ERR_CLIENT_MODEL_CHANGED: {
    meaning:
      "A tile was answered by another version of the model than the run's (the service's x-model-sha256 against GET /api/metadata at the start): a --server with another version, or the model changed during the run; the slide is not done.",
  },
  TILE_ERR_CLIENT_UNEXPECTED: {
    meaning:
      'A slide failed with an error tile-infer has no code for (a fault of its own, or of an input it does not check yet); the line keeps its message: please report it.',
  },
  TILE_ERR_CLIENT_UNREACHABLE: {
    meaning:
      'No --server answered within seconds of the start; the line names the URLs and why (connection refused, ...).',
  },
  TILE_ERR_CLIENT_MODEL_TASKS: {
    meaning: 'The --model serves neither embeddings nor predictions (a segmentation model goes in --tissue-model).',
  },
  TILE_ERR_CLIENT_TILE_SHAPE: { meaning: "The model's tiles are not square; slides are tiled in squares." },
  TILE_ERR_CLIENT_HEATMAP_GENE: { meaning: '--heatmap names a gene the model does not predict.' },
  TILE_ERR_SLIDE_FORMAT: {
    meaning:
      'A slide format or encoding the built-in TIFF reader does not read, and libopenslide is not there to read it (or does not recognise the file).',
  },
  TILE_ERR_SLIDE_UNREADABLE: {
    meaning:
      "A slide region cannot be read or decoded, or a TIFF's structure is damaged (a chain of directories that loops, a tag's count that is not the image's or holds more bytes than the file, more SubIFD levels than a pyramid has); the line names the file, directory and tag.",
  },
  TILE_ERR_SLIDE_NO_MPP: { meaning: 'The slide records no microns per pixel: give it with --mpp.' },
  TILE_ERR_SLIDE_MISSING: {
    meaning:
      'The slide path does not exist, is not a file, or cannot be read (permission); for a URL, the server answers 404 (S3: NoSuchKey, NoSuchBucket).',
  },
  TILE_ERR_SLIDE_DENIED: {
    meaning:
      'The server holding a remote slide refuses it (HTTP 401 or 403; S3: AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch); the line names the URL and what the server said.',
  },
  TILE_ERR_SLIDE_NO_RANGES: {
    meaning:
      'The HTTP server of a slide URL does not serve byte ranges (it answers a range request with the whole file): the slide is not downloaded; copy it or serve it from a server that does.',
  },
  TILE_ERR_SLIDE_REMOTE: {
    meaning:
      'A remote slide could not be read: the server is unreachable, kept failing (5xx), gave no answer within 30 s, stopped or cut short its body, or sent it slower than 64 KiB/s (after 30 s of slack), through the retries; answered out of protocol; or the object changed while it was read (its ETag).',
  },
  TILE_ERR_SLIDE_MPP_RANGE: {
    meaning:
      'The MPP the slide records is outside what scanners produce (0.05 to 20 µm/px; a TIFF saying 72 dpi is 352.8); the line names the tag: give the MPP with --mpp.',
  },
  TILE_ERR_SLIDE_TOO_LARGE: {
    meaning: 'The slide at its MPP is larger than a glass slide (100 mm a side): a wrong MPP or a damaged file.',
  },
  TILE_ERR_SLIDE_MPP_CONFLICT: {
    meaning:
      "A DICOM slide's PixelSpacing gives pixels that are not square, or disagrees with ImagedVolumeWidth/Height over its pixel matrix; the line names both values: give the MPP with --mpp.",
  },
  TILE_ERR_SLIDE_SERIES: {
    meaning:
      'A DICOM folder holds more than one series (the line names their UIDs), or a DICOMweb study URL more or fewer than one slide series: give one series.',
  },
  TILE_ERR_SLIDE_DICOMWEB_AUTH: {
    meaning:
      'The DICOMweb server answered 401 or 403 (the line names the URL): set TILE_INFER_DICOMWEB_AUTHORIZATION to the Authorization header it takes.',
  },
  TILE_ERR_SLIDE_DICOMWEB_NOT_FOUND: {
    meaning: 'The DICOMweb server answered 404 for the study, series, instance or frame the line names.',
  },
  TILE_ERR_SLIDE_DICOMWEB_DOWN: {
    meaning:
      'The DICOMweb server did not answer, answered 5xx, cut its answer short, stopped sending it for 30 s or sent it slower than 64 KiB/s (after 30 s of slack), through every retry (the line names the URL and the last reason).',
  },
  TILE_ERR_SLIDE_DICOMWEB_REFUSED: {
    meaning:
      'The DICOMweb server answered another 4xx, or not what WADO-RS gives, or more bytes than what was asked for may take (the line names the URL and what came).',
  },
  TILE_ERR_SLIDE_NO_TISSUE: { meaning: 'No tile of the grid has --min-tissue of tissue.' },
  TILE_ERR_SLIDE_TRUNCATED: {
    meaning: 'The slide file ends before the data its directories point to (a copy cut short): copy it again.',
  },
  TILE_ERR_COHORT_MANIFEST: {
    meaning:
      'A cohort manifest CSV cannot be used: unreadable, no wsi column, an empty wsi cell, an mpp outside 0.05 to 20.',
  },
  TILE_ERR_COHORT_SHARD: {
    meaning: '--shard, --shards or the Slurm / Kubernetes variables give no valid shard (INDEX from 0 to COUNT-1).',
  },
  TILE_ERR_COHORT_DUPLICATE: {
    meaning: 'A slide is named twice (two manifest rows, or a manifest and an argument); the line names both places.',
  },
  TILE_ERR_COHORT_PLAN_CHANGED: {
    meaning:
      'With --no-overwrite, a slide finished in --out under another plan (model, tile, MPP, --min-tissue, tissue model); the line names what changed.',
  },
  TILE_ERR_COHORT_NAME_CLASH: {
    meaning:
      'Two slides would write the same outputs (their file names are equal): in one run they are refused before any work; a slide whose name an earlier run gave another slide in the same --out fails.',
  },
  TILE_ERR_OUTPUT_LOCKED: {
    meaning:
      'Another tile-infer writes into --out (the same shard): OUT/tile-infer.lock names its host, pid and start time. A lock whose process is gone on this host is taken over.',
  },
  TILE_ERR_OUTPUT_WRITE: {
    meaning:
      'An output (a file or folder in --out) cannot be written; the line names the path and the reason (permission, not a folder, disk full).',
  },
  TILE_ERR_OUTPUT_JOURNAL: {
    meaning:
      'A journal line in OUT/.journal is damaged (a value not a finite float32, the wrong length, a tile twice); the line names file and line: delete the file to redo the slide.',
  },
  TILE_ERR_PLAN_HEADER: { meaning: 'The --plan CSV has no file, x and y columns.' },
  TILE_ERR_PLAN_COORDS: {
    meaning: "A tile's x and y are not integers (plan) or not in its name (x<N>_y<N> or <N>_<N>.png).",
  },
  TILE_ERR_PLAN_NO_TILES: { meaning: 'The tiles folder holds no PNG tiles, or it (or the --plan CSV) cannot be read.' },
  TILE_ERR_PLAN_NOT_PNG: { meaning: 'A tile is not a PNG (its TILE_ERR_PNG_* reason follows).' },
} as const satisfies Record<string, Entry | HttpEntry>;

export type ErrorCode = keyof typeof REGISTRY;
/** The codes the HTTP API answers with (those with a status). */
export type HttpCode = { [C in ErrorCode]: (typeof REGISTRY)[C] extends HttpEntry ? C : never }[ErrorCode];
/** The codes of one area: CodesOf<'CONFIG'> is every TILE_ERR_CONFIG_*. */
export type CodesOf<Area extends string> = Extract<ErrorCode, `TILE_ERR_${Area}_${string}`>;

/** An error as one line for a person: `[CODE] message` when it has a code. */
export const errorLine = (err: Error): string =>
  err instanceof CodedError ? `[${err.code}] ${err.message}` : err.message;

/** Every code with what it means and, for the HTTP API's, its status: README's table. */
export const errorCodes = (): { code: ErrorCode; status: number | null; meaning: string }[] =>
  Object.entries(REGISTRY).map(([code, entry]) => ({
    code: code as ErrorCode,
    status: 'status' in entry ? entry.status : null,
    meaning: entry.meaning,
  }));

/** An error with its code; each area's error class extends it. */
export class CodedError<C extends ErrorCode = ErrorCode> extends Error {
  constructor(
    readonly code: C,
    message: string,
  ) {
    super(message);
  }
}

/** An error as it crosses IPC: enough to rebuild it on the other side. */
export interface WireError {
  code: HttpCode;
  message: string;
  detail?: FieldError[];
  /** The worker did not run the tile and another instance may: the front retries it there. */
  retryable?: true;
  /** A 503's Retry-After, when the error gave one. */
  retryAfterS?: number;
}

const isHttpCode = (code: string): code is HttpCode => 'status' in ((REGISTRY as Record<string, Entry>)[code] ?? {});

export class ServiceError extends CodedError<HttpCode> {
  override name = 'ServiceError';
  readonly statusCode: number;
  /** A 503's Retry-After in seconds, when the error knows better than the configured one. */
  retryAfterS?: number;

  constructor(
    code: HttpCode,
    message: string,
    readonly detail?: FieldError[],
  ) {
    super(code, message);
    this.statusCode = REGISTRY[code].status;
  }

  /** The response body the contract gives this error. */
  body(): unknown {
    switch (REGISTRY[this.code].body) {
      case 'validation':
        return { detail: this.detail ?? [] };
      case 'loading':
        return { status: 'loading' };
      case 'internal':
        return { detail: 'Internal server error' };
      default:
        return { detail: this.message };
    }
  }

  /** Set from the wire: the tile was not run, and another instance may run it. */
  retryable = false;

  /** `retryable`: say so to the front (a worker that did not run the tile). */
  toWire(retryable = false): WireError {
    return {
      code: this.code,
      message: this.message,
      ...(this.detail && { detail: this.detail }),
      ...(retryable && { retryable }),
      ...(this.retryAfterS !== undefined && { retryAfterS: this.retryAfterS }),
    };
  }

  static fromWire(wire: WireError): ServiceError {
    const error = new ServiceError(isHttpCode(wire.code) ? wire.code : 'TILE_ERR_INTERNAL', wire.message, wire.detail);
    error.retryable = wire.retryable === true;
    if (wire.retryAfterS !== undefined) error.retryAfterS = wire.retryAfterS;
    return error;
  }

  /** Any thrown value as a ServiceError (an unknown error is TILE_ERR_INTERNAL, its message kept for the log). */
  static from(err: unknown): ServiceError {
    return err instanceof ServiceError
      ? err
      : new ServiceError('TILE_ERR_INTERNAL', err instanceof Error ? err.message : String(err));
  }
}

/** One constructor per error, so call sites read as what happened. */
export const errors = {
  tileInvalid: (detail: FieldError[]) =>
    new ServiceError('TILE_ERR_VALIDATION', detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '), detail),
  modelLoading: (model: string) => new ServiceError('TILE_ERR_MODEL_LOADING', `model ${model} is loading`),
  modelFailed: (model: string, reason: string) =>
    new ServiceError('TILE_ERR_MODEL_FAILED', `model ${model} failed to load: ${reason}`),
  queueFull: (model: string, why: string, retryAfterS: number) =>
    Object.assign(
      new ServiceError(
        'TILE_ERR_QUEUE_FULL',
        `model ${model} cannot take the request: ${why}; retry after ${retryAfterS} s`,
      ),
      { retryAfterS },
    ),
  frontBusy: (bytes: number) =>
    new ServiceError(
      'TILE_ERR_FRONT_BUSY',
      `this front holds ${bytes} bytes of requests, its limit (front.max_inflight_bytes); retry later`,
    ),
  underPressure: (what: string, value: number) =>
    new ServiceError('TILE_ERR_UNDER_PRESSURE', `Service under pressure (${what}: ${Math.round(value)}); retry later`),
  shuttingDown: () =>
    new ServiceError('TILE_ERR_SHUTTING_DOWN', 'the service is shutting down; retry on another host or later'),
  deadline: (model: string, timeoutMs: number) =>
    new ServiceError('TILE_ERR_DEADLINE', `model ${model} did not answer within the ${timeoutMs} ms request deadline`),
  cancelled: () => new ServiceError('TILE_ERR_CANCELLED', 'the client closed its connection before the answer'),
  clientTooSlow: () =>
    new ServiceError(
      'TILE_ERR_CLIENT_TOO_SLOW',
      "the client fell behind its pace while others needed the front's budget: its connection was reset",
    ),
  workerGone: (why: string) => new ServiceError('TILE_ERR_WORKER_GONE', why),
  unauthorized: () => new ServiceError('TILE_ERR_UNAUTHORIZED', 'Not authenticated'),
  methodNotAllowed: (method: string, path: string, allowed: string[]) =>
    new ServiceError(
      'TILE_ERR_METHOD_NOT_ALLOWED',
      `Method Not Allowed: ${path} takes ${allowed.join(', ')}, not ${method}`,
    ),
  notAcceptable: (why: string) => new ServiceError('TILE_ERR_NOT_ACCEPTABLE', why),
  unsupportedContentEncoding: (encoding: string) =>
    new ServiceError(
      'TILE_ERR_UNSUPPORTED_ENCODING',
      `Content-Encoding ${encoding} is not supported: send the body uncompressed (a PNG is compressed already; raw pixels are the fastest body)`,
    ),
  headersTooLarge: (limit: number) =>
    new ServiceError(
      'TILE_ERR_HEADERS_TOO_LARGE',
      `the request's headers, its URL included, are over the limit of ${limit} bytes`,
    ),
  requestTimeout: () =>
    new ServiceError(
      'TILE_ERR_REQUEST_TIMEOUT',
      'the request did not arrive in time (front.headers_timeout_ms, front.body_timeout_ms)',
    ),
  v2Invalid: (why: string) => new ServiceError('TILE_ERR_V2_INVALID', why),
  /** A model (or a version of it) the Open Inference Protocol's paths name that is not served. */
  modelNotFound: (what: string, models: string[]) =>
    new ServiceError('TILE_ERR_NOT_FOUND', `${what} is not served; enabled models: ${models.join(', ') || 'none'}`),
  badRequest: (reason: string) => new ServiceError('TILE_ERR_BAD_REQUEST', `malformed HTTP request: ${reason}`),
  expectationFailed: (expect: string) =>
    new ServiceError(
      'TILE_ERR_EXPECTATION_FAILED',
      `Expect: ${expect} cannot be met; the only expectation HTTP defines is 100-continue (RFC 9110 10.1.1)`,
    ),
  noTunnel: (target: string) =>
    new ServiceError('TILE_ERR_NOT_IMPLEMENTED', `CONNECT ${target}: this service is not a proxy and opens no tunnel`),
  /** Under /api and /health/ready the answer names the enabled models, the likely mistake being
   *  a model's name. */
  notFound: (url: string, models: string[]) =>
    new ServiceError(
      'TILE_ERR_NOT_FOUND',
      /^\/(api|health\/ready)\//.test(url)
        ? `Not Found; enabled models: ${models.join(', ') || 'none'} (GET /api/models)`
        : 'Not Found',
    ),
};
