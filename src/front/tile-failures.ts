// How a tile sent to a worker fails short of its answer, which of those failures another instance
// may take (the front's one retry), and how each is answered to the client.
import type { DecodeFailure, TileJob } from '../ipc/protocol.js';
import { errors, ServiceError } from '../lib/errors.js';
import { decodeFailureItem } from './decode-failure.js';

/** The request never reached a worker: another instance may take it. */
export class NotSent extends Error {}
/** The worker died with the request in flight; `external` when it was killed from outside. */
export class WorkerLost extends Error {
  constructor(readonly external: boolean) {
    super(external ? 'worker killed from outside' : 'worker died');
  }
}
/** No answer by the deadline: the front's timer, or the worker dropped the tile (its deadline
 *  passed, or its batch could not finish by it). */
export class Expired extends Error {}
/** The worker could not decode the tile's image: a 422, worded here with where the image was. */
export class Undecodable extends Error {
  constructor(readonly failure: DecodeFailure) {
    super(failure.kind);
  }
}

/** Whether another instance may take the tile: it never reached its worker, its worker was killed
 *  from outside, or the worker's error says it did not run the tile (one whose device failed did
 *  not). A worker that died of a request itself is not given another. */
export function retryable(err: unknown): boolean {
  return (
    err instanceof NotSent ||
    (err instanceof WorkerLost && err.external) ||
    (err instanceof ServiceError && err.retryable)
  );
}

/** The ServiceError a tile of `model` is answered with when it failed with `err`; `timeoutMs`,
 *  the model's request_timeout_ms, words an expired one. */
export function failureAnswer(model: string, err: unknown, job: TileJob, timeoutMs: () => number): ServiceError {
  if (err instanceof Undecodable) return errors.tileInvalid([decodeFailureItem(job.image.loc, err.failure)]);
  if (err instanceof NotSent || err instanceof WorkerLost)
    return errors.workerGone(`${model}: ${err.message} with the request in flight`);
  if (err instanceof Expired) return errors.deadline(model, timeoutMs());
  return ServiceError.from(err);
}
