// A typed client for the tile service: at most `concurrency` tiles in flight over several servers,
// each request failed over and retried until its deadline (failover.ts), each tile given as pixels
// or PNG bytes (inferTile) in the body each server takes best (body-choice.ts), and the servers
// checked for an answer before a run (reachability.ts).
import type { Static } from 'typebox';
import type { ModelMetadata, TileRequest, TileResponse } from '../contract/schemas.js';
import type { TileBodyType } from '../contract/endpoints.js';
import { BodyChoice, requestOf, type TileInput } from './body-choice.js';
import { Failover, type RetryPolicy } from './failover.js';
import { checkReachable } from './reachability.js';
import { Semaphore } from './semaphore.js';
import type { MadeBody } from './tile-body.js';
import { UsageError } from './usage-error.js';

export type TileResponseBody = Static<typeof TileResponse>;
export type ModelMetadataBody = Static<typeof ModelMetadata>;
/** A tile's answer, and the package digest of the model that gave it (x-model-sha256; null from a
 *  service that does not say it). */
export type TileAnswer = TileResponseBody & { modelSha256: string | null };

export interface ClientOptions extends RetryPolicy {
  servers: string[];
  /** Tiles in flight at once, over all servers. */
  concurrency: number;
  /** 'json' sends every tile as the contract's JSON, whatever the servers take (default 'auto'). */
  bodies?: 'auto' | 'json';
}

export class TileClient {
  private readonly failover: Failover;
  private readonly bodies: BodyChoice;
  private readonly slots: Semaphore;

  constructor(options: ClientOptions) {
    if (!options.servers.length) throw new UsageError('TILE_ERR_CLIENT_USAGE', 'at least one server URL is needed');
    // As many connections per server as there are slots: with one server up, it takes all the load.
    this.failover = new Failover(options.servers, options.concurrency, options);
    this.bodies = new BodyChoice(this.failover.servers, options.bodies);
    this.slots = new Semaphore(options.concurrency);
  }

  get retries(): number {
    return this.failover.retries;
  }

  /** The last retry's reason, until a request gets through again (for progress displays). */
  get waiting(): string | null {
    return this.failover.waiting;
  }

  /** Checks that the servers answer at all (GET /health/live), retrying connection errors for up to
   *  `withinMs`: a run is refused at once when none does, rather than waiting out each tile's
   *  deadline. Returns the servers that did not answer when others did. */
  reachable(withinMs = 10_000): Promise<string[]> {
    return checkReachable(this.failover.servers, withinMs);
  }

  metadata(model: string): Promise<ModelMetadataBody> {
    return this.failover.call('GET', `/api/metadata/${encodeURIComponent(model)}`);
  }

  /** Posts one tile's request to an endpoint path such as `/api/embed/tile-embed` (query
   *  included): the contract's JSON object, or a body made ahead (tile-body.ts). */
  async infer(path: string, request: TileRequest | MadeBody): Promise<TileAnswer> {
    return this.post(path, requestOf(path, request));
  }

  /** Posts one tile given as pixels or PNG bytes, in the body the server an attempt goes to takes
   *  best for the path's model (body-choice.ts). */
  async inferTile(path: string, tile: TileInput): Promise<TileAnswer> {
    return this.post(path, this.bodies.forTile(path, tile));
  }

  /** A tile's request in one of the `concurrency` slots, with failover and retries. */
  private async post(path: string, request: Parameters<Failover['call']>[2]): Promise<TileAnswer> {
    const release = await this.slots.acquire();
    try {
      const { body, headers } = await this.failover.answer<TileResponseBody>('POST', path, request);
      const sha256 = headers['x-model-sha256'];
      return { ...body, modelSha256: typeof sha256 === 'string' ? sha256 : null };
    } finally {
      release();
    }
  }

  /** The bodies every server takes for an endpoint path's model (the contract's JSON at least):
   *  what a caller that makes bodies ahead (tile-infer's reader threads) may make. */
  bodyTypes(path: string): Promise<Set<TileBodyType>> {
    return this.bodies.everyServerTakes(path);
  }

  close(): Promise<void> {
    return this.failover.close();
  }
}
