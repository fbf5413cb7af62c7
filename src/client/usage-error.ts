// What tile-infer is asked cannot be done as asked: an option, a manifest, a shard, slides whose
// names clash, or a model or gene that does not fit the command. Fixed by changing the command line (exit status 2), not by retrying.
import { CodedError, type CodesOf } from '../lib/errors.js';

export class UsageError extends CodedError<
  | Exclude<CodesOf<'CLIENT'>, 'TILE_ERR_CLIENT_HTTP' | 'TILE_ERR_CLIENT_DEADLINE' | 'TILE_ERR_CLIENT_UNREACHABLE'>
  | CodesOf<'COHORT'>
> {
  override name = 'UsageError';
}
