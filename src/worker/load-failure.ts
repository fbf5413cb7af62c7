// What a worker whose load failed tells the supervisor: why, whether the package is at fault (wait
// for its files to change) or the moment (retry with backoff), and always a code, so readiness,
// /api/models and /diagnostics name one. An error without its own code (a RangeError "Array
// buffer allocation failed" from a warm-up batch, a socket that cannot listen) is
// TILE_ERR_MODEL_LOAD: before, its code was null there.
import type { ErrorCode } from '../lib/errors.js';
import { CodedError } from '../lib/errors.js';
import { PackageError } from '../model-package/model-package.js';
import { NoProviderError } from './providers.js';

/** Load errors that retrying with the same files may cure (memory, the GPU); any other load
 *  error is the package's own. */
const TRANSIENT = /out of memory|cuda|cudnn|bad_alloc|ENOMEM|EMFILE/i;

export function loadFailure(err: unknown): { reason: string; packageFault: boolean; code: ErrorCode } {
  const reason = err instanceof Error ? err.message : String(err);
  return {
    reason,
    packageFault: err instanceof PackageError || err instanceof NoProviderError || !TRANSIENT.test(reason),
    code: err instanceof CodedError ? err.code : 'TILE_ERR_MODEL_LOAD',
  };
}
