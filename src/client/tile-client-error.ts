// The tile client's own errors: what failover, reachability and the client itself refuse with.
import { CodedError } from '../lib/errors.js';

type TileClientCode = 'TILE_ERR_CLIENT_HTTP' | 'TILE_ERR_CLIENT_DEADLINE' | 'TILE_ERR_CLIENT_UNREACHABLE';

/** An answer the client will not retry (4xx), a tile that ran out of time, or no server at all. */
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
