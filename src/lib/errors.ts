// Every domain error of the service, defined once: a code, an HTTP status and the body the
// contract gives it (fastify's lib/errors.js is the model). Errors are thrown anywhere — front,
// worker, supervisor — cross process boundaries as { code, message, detail } and are turned into a
// response in one place (src/front/plugins/errors.ts).

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

const REGISTRY = {
  /** The request fails a check (schema, tile size, PNG): 422 with every field error. */
  TILE_INVALID: { status: 422, body: 'validation' },
  /** No instance of the model is ready (starting, loading, restarting). */
  MODEL_LOADING: { status: 503, body: 'loading' },
  /** The model's package cannot load; retried when its files change, on SIGHUP, and slowly. */
  MODEL_FAILED: { status: 503, body: 'detail' },
  /** The model's requests outstanding reached its queue bound. */
  QUEUE_FULL: { status: 503, body: 'detail' },
  /** The front holds as many request bytes as it may; a bound on its memory. */
  FRONT_BUSY: { status: 503, body: 'detail' },
  /** The front's event loop or heap is past its configured limit (@fastify/under-pressure). */
  UNDER_PRESSURE: { status: 503, body: 'detail' },
  /** The service is draining for a stop. */
  SHUTTING_DOWN: { status: 503, body: 'detail' },
  /** No answer within the request deadline; the request is forgotten. */
  DEADLINE: { status: 504, body: 'detail' },
  /** The worker process died with the request in flight (answered as loading: it restarts). */
  WORKER_GONE: { status: 503, body: 'loading' },
  /** No such route; names the enabled models. */
  NOT_FOUND: { status: 404, body: 'detail' },
  /** The path exists for other methods (listed in Allow). */
  METHOD_NOT_ALLOWED: { status: 405, body: 'detail' },
  /** The Accept header admits no answer this request can have (a binary answer of two tensors). */
  NOT_ACCEPTABLE: { status: 406, body: 'detail' },
  /** A Content-Encoding (gzip, ...) other than identity: bodies are read as sent. */
  UNSUPPORTED_CONTENT_ENCODING: { status: 415, body: 'detail' },
  /** HTTP that Node's parser refuses: headers (the URL included) over the limit, a request that
   *  did not arrive in time, malformed HTTP. Written on the socket, which then closes. */
  HEADERS_TOO_LARGE: { status: 431, body: 'detail' },
  REQUEST_TIMEOUT: { status: 408, body: 'detail' },
  BAD_REQUEST: { status: 400, body: 'detail' },
  /** session.run or another server part failed. */
  INTERNAL: { status: 500, body: 'internal' },
} as const satisfies Record<string, { status: number; body: BodyKind }>;

export type ErrorCode = keyof typeof REGISTRY;

/** An error as it crosses IPC: enough to rebuild it on the other side. */
export interface WireError {
  code: ErrorCode;
  message: string;
  detail?: FieldError[];
}

export class ServiceError extends Error {
  override name = 'ServiceError';
  readonly statusCode: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly detail?: FieldError[],
  ) {
    super(message);
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

  toWire(): WireError {
    return { code: this.code, message: this.message, ...(this.detail && { detail: this.detail }) };
  }

  static fromWire(wire: WireError): ServiceError {
    return new ServiceError(wire.code in REGISTRY ? wire.code : 'INTERNAL', wire.message, wire.detail);
  }

  /** Any thrown value as a ServiceError (an unknown error is INTERNAL, its message kept for the log). */
  static from(err: unknown): ServiceError {
    return err instanceof ServiceError ? err : new ServiceError('INTERNAL', err instanceof Error ? err.message : String(err));
  }
}

/** One constructor per error, so call sites read as what happened. */
export const errors = {
  tileInvalid: (detail: FieldError[]) => new ServiceError('TILE_INVALID', detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; '), detail),
  modelLoading: (model: string) => new ServiceError('MODEL_LOADING', `model ${model} is loading`),
  modelFailed: (model: string, reason: string) => new ServiceError('MODEL_FAILED', `model ${model} failed to load: ${reason}`),
  queueFull: (model: string, limit: number) => new ServiceError('QUEUE_FULL', `model ${model} has ${limit} requests outstanding on this front, its share of max_queue; retry later`),
  frontBusy: (bytes: number) => new ServiceError('FRONT_BUSY', `this front holds ${bytes} bytes of requests, its limit (front.max_inflight_bytes); retry later`),
  underPressure: (what: string, value: number) => new ServiceError('UNDER_PRESSURE', `Service under pressure (${what}: ${Math.round(value)}); retry later`),
  shuttingDown: () => new ServiceError('SHUTTING_DOWN', 'the service is shutting down; retry on another host or later'),
  deadline: (model: string, timeoutMs: number) => new ServiceError('DEADLINE', `model ${model} did not answer within the ${timeoutMs} ms request deadline`),
  workerGone: (why: string) => new ServiceError('WORKER_GONE', why),
  methodNotAllowed: (method: string, path: string, allowed: string[]) => new ServiceError('METHOD_NOT_ALLOWED', `Method Not Allowed: ${path} takes ${allowed.join(', ')}, not ${method}`),
  notAcceptable: (why: string) => new ServiceError('NOT_ACCEPTABLE', why),
  unsupportedContentEncoding: (encoding: string) =>
    new ServiceError('UNSUPPORTED_CONTENT_ENCODING', `Content-Encoding ${encoding} is not supported: send the body uncompressed (a PNG is compressed already; raw pixels are the fastest body)`),
  headersTooLarge: (limit: number) => new ServiceError('HEADERS_TOO_LARGE', `the request's headers, its URL included, are over the limit of ${limit} bytes`),
  requestTimeout: () => new ServiceError('REQUEST_TIMEOUT', 'the request did not arrive in time (front.headers_timeout_ms, front.body_timeout_ms)'),
  badRequest: (reason: string) => new ServiceError('BAD_REQUEST', `malformed HTTP request: ${reason}`),
  /** Under /api and /health/ready the answer names the enabled models, the likely mistake being
   *  a model's name. */
  notFound: (url: string, models: string[]) =>
    new ServiceError('NOT_FOUND', /^\/(api|health\/ready)\//.test(url) ? `Not Found; enabled models: ${models.join(', ') || 'none'} (GET /api/models)` : 'Not Found'),
};
