// What tile-infer is asked cannot be done as asked: an option, or a model or gene that does not
// fit the command. Fixed by changing the command line (exit status 2), not by retrying.
import { CodedError, type CodesOf } from '../lib/errors.js';

export class UsageError extends CodedError<Exclude<CodesOf<'CLIENT'>, 'TILE_ERR_CLIENT_HTTP' | 'TILE_ERR_CLIENT_DEADLINE'>> {
  override name = 'UsageError';
}
