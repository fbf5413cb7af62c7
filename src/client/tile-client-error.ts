// The tile client's own errors: what failover, reachability and the client itself refuse with.
import { CodedError } from '../lib/errors.js';

type TileClientCode =
  | 'TILE_ERR_CLIENT_HTTP'
  | 'TILE_ERR_CLIENT_DEADLINE'
  | 'TILE_ERR_CLIENT_UNREACHABLE'
  | 'TILE_ERR_CLIENT_MODEL_CHANGED';

/** An answer the client will not retry (4xx), a tile that ran out of time, no server at all, or an
 *  answer from another model version than the run's. */
export class TileClientError extends CodedError<TileClientCode> {
  override name = 'TileClientError';
  constructor(
    code: TileClientCode,
    message: string,
    readonly status?: number,
    readonly body?: unknown,
  ) {
    super(code, message);
  }
}
