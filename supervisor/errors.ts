// Why a request to a model could not be answered with a result; the HTTP layer maps each to a status.
import type { FieldError } from '../src/ipc/protocol.js';

/** No instance is ready (starting, loading, restarting): 503 {"status": "loading"}. */
export class ModelLoadingError extends Error {
  constructor(readonly model: string, readonly retryAfterS: number) {
    super(`model ${model} is loading`);
  }
}
/** The model's bounded queue is full: 503 with Retry-After. */
export class QueueFullError extends Error {
  constructor(readonly model: string, readonly limit: number, readonly retryAfterS: number) {
    super(`model ${model} has ${limit} requests outstanding, its queue limit; retry later`);
  }
}
/** No answer within the request deadline; the request is forgotten: 504. */
export class DeadlineError extends Error {
  constructor(readonly model: string, readonly timeoutMs: number) {
    super(`model ${model} did not answer within the ${timeoutMs} ms request deadline`);
  }
}
/** The worker process died with the request in flight. */
export class WorkerGoneError extends Error {}
/** The worker found the tile invalid: 422. */
export class TileInvalidError extends Error {
  constructor(readonly errors: FieldError[]) {
    super('invalid tile');
  }
}
/** session.run failed: 500. */
export class InferenceFailedError extends Error {}
