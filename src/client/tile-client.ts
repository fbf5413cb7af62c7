// A typed client for the tile service: keep-alive connection pools (undici), at most
// `concurrency` tiles in flight, 503 answered by waiting Retry-After (model loading, queue full,
// under pressure), exponential backoff with full jitter on connection errors and other 5xx,
// several servers (each tile goes to the least-busy healthy one; one that fails is benched for
// its backoff and the tile moves on), and a deadline per tile across all its attempts. A tile
// given as pixels or PNG bytes (inferTile) goes in the body each server takes best, as its
// GET /api/models says: raw RGB, else the PNG file, else the contract's JSON (older servers).
import { Pool } from 'undici';
import type { Static } from 'typebox';
import type { ModelMetadata, TileRequest, TileResponse } from '../contract/schemas.js';
import { TILE_BODY_TYPES, type TileBodyType } from '../contract/endpoints.js';
import { CodedError } from '../lib/errors.js';
import { encodeRgbPng } from '../tile/png-write.js';
import { Semaphore } from './semaphore.js';
import { tileQuery, tileRequestBody, withQuery, type MadeBody, type TileFields } from './tile-body.js';
import { UsageError } from './usage-error.js';

export type TileResponseBody = Static<typeof TileResponse>;
export type ModelMetadataBody = Static<typeof ModelMetadata>;

export interface ClientOptions {
  servers: string[];
  /** Tiles in flight at once, over all servers. */
  concurrency: number;
  /** Give up on a tile after this long, retries included. */
  deadlineMs?: number;
  /** First backoff step; doubles per failed attempt up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Called on every retry (for progress displays). */
  onRetry?: (reason: string) => void;
  /** 'json' sends every tile as the contract's JSON, whatever the servers take (default 'auto'). */
  bodies?: 'auto' | 'json';
}

/** A tile for inferTile: its fields, and its image as raw pixels (uint8 RGB, row-major, width x
 *  height x 3 bytes) or as PNG bytes. */
export type TileInput = { fields: TileFields } & (
  | { rgb: Uint8Array; png?: undefined }
  | { png: Uint8Array; rgb?: undefined }
);

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

interface Server {
  url: string;
  pool: Pool;
  inFlight: number;
  /** Not chosen before this time (after a connection error or 5xx). */
  benchedUntil: number;
  /** The request bodies each model takes (GET /api/models), once read. */
  bodyTypes: Promise<Map<string, Set<string>>> | null;
}

/** One attempt's request: where it goes and what it carries. */
interface Outgoing {
  path: string;
  body?: Buffer;
  contentType?: TileBodyType;
}

/** A made body's request to an endpoint path: a binary body's fields go in the query. */
function outgoing(path: string, made: MadeBody): Outgoing {
  if (made.type === 'application/json') return { path, body: made.bytes, contentType: made.type };
  return { path: withQuery(path, tileQuery(made.fields)), body: made.bytes, contentType: made.type };
}

/** The model of a model endpoint's path (`/api/embed/tile-embed?...`). */
function modelOf(path: string): string | undefined {
  const name = /^\/api\/(?:predict|embed)\/([^/?]+)/.exec(path)?.[1];
  return name && decodeURIComponent(name);
}

/** The longest query a binary body's fields may make; longer ones (a bulk_rna of thousands of
 *  genes) go in the JSON body. Node's HTTP server refuses over 16 KiB of headers (431), nginx
 *  a request line over 8 KiB. */
const MAX_QUERY = 4096;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Retry-After in seconds (the service sends integers); HTTP dates are honoured too. */
export function retryAfterMs(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

export class TileClient {
  private readonly servers: Server[];
  private readonly slots: Semaphore;
  private readonly deadlineMs: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  retries = 0;
  /** The last retry's reason, until a request gets through again (for progress displays). */
  waiting: string | null = null;

  constructor(private readonly options: ClientOptions) {
    if (!options.servers.length) throw new UsageError('TILE_ERR_CLIENT_USAGE', 'at least one server URL is needed');
    // Each pool may open as many connections as there are slots: with one server up, it takes
    // all the load.
    this.servers = options.servers.map((url) => ({
      url: url.replace(/\/$/, ''),
      pool: new Pool(url, { connections: options.concurrency, pipelining: 1, keepAliveTimeout: 30_000 }),
      inFlight: 0,
      benchedUntil: 0,
      bodyTypes: null,
    }));
    this.slots = new Semaphore(options.concurrency);
    this.deadlineMs = options.deadlineMs ?? 300_000;
    this.backoffMs = options.backoffMs ?? 100;
    this.maxBackoffMs = options.maxBackoffMs ?? 5_000;
  }

  /** The healthy server with the fewest tiles in flight; when all are benched, the one back first. */
  private pick(): Server {
    const now = Date.now();
    const healthy = this.servers.filter((s) => s.benchedUntil <= now);
    const candidates = healthy.length
      ? healthy
      : [...this.servers].sort((a, b) => a.benchedUntil - b.benchedUntil).slice(0, 1);
    return candidates.reduce((best, s) => (s.inFlight < best.inFlight ? s : best));
  }

  private retry(reason: string): void {
    this.retries++;
    this.waiting = reason;
    this.options.onRetry?.(reason);
  }

  /** One request with retries; resolves with the parsed JSON body of the first 2xx. `request`
   *  is the same for every server, or made for the server an attempt goes to. */
  private async call<T>(
    method: 'GET' | 'POST',
    path: string,
    request: Outgoing | ((server: Server) => Promise<Outgoing>) = { path },
  ): Promise<T> {
    const deadline = Date.now() + this.deadlineMs;
    let reason = '';
    for (let attempt = 0; ; attempt++) {
      const server = this.pick();
      const remaining = deadline - Date.now();
      if (remaining <= 0)
        throw new TileClientError(
          'TILE_ERR_CLIENT_DEADLINE',
          `${method} ${path}: no answer within the ${this.deadlineMs} ms deadline${reason && ` (last: ${reason})`}`,
        );
      let wait: number;
      // Made before the try: a body that cannot be made is the caller's error, not the server's.
      const out = typeof request === 'function' ? await request(server) : request;
      server.inFlight++;
      try {
        const res = await server.pool.request({
          method,
          path: out.path,
          body: out.body,
          headers: out.body ? { 'content-type': out.contentType ?? 'application/json' } : {},
          headersTimeout: remaining,
          bodyTimeout: remaining,
        });
        const text = await res.body.text();
        if (res.statusCode < 300) {
          this.waiting = null;
          return JSON.parse(text) as T;
        }
        if (res.statusCode === 503) {
          // Loading or queue full: the server says when to come back; that is not a failure of
          // the server, so it stays eligible.
          wait = retryAfterMs(res.headers['retry-after']) ?? this.backoff(attempt);
          reason = `503 ${text.slice(0, 80)}`;
        } else if (res.statusCode >= 500) {
          wait = this.backoff(attempt);
          server.benchedUntil = Date.now() + wait;
          reason = `${res.statusCode} from ${server.url}`;
        } else {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // not JSON: keep the text
          }
          throw new TileClientError(
            'TILE_ERR_CLIENT_HTTP',
            `${method} ${server.url}${path}: ${res.statusCode} ${text.slice(0, 500)}`,
            res.statusCode,
            parsed,
          );
        }
      } catch (err) {
        if (err instanceof TileClientError) throw err;
        // Connection refused or reset, socket closed, timeout: back off and fail over.
        wait = this.backoff(attempt);
        server.benchedUntil = Date.now() + wait;
        reason = `${(err as NodeJS.ErrnoException).code ?? (err as Error).message} from ${server.url}`;
      } finally {
        server.inFlight--;
      }
      this.retry(reason);
      // Another healthy server can take the tile at once; otherwise wait.
      const elsewhere = this.servers.some((s) => s !== server && s.benchedUntil <= Date.now());
      await sleep(Math.min(elsewhere ? 0 : wait, Math.max(0, deadline - Date.now())));
    }
  }

  /** Full jitter: a uniform wait in [0, min(cap, base * 2^attempt)]. */
  private backoff(attempt: number): number {
    return Math.random() * Math.min(this.maxBackoffMs, this.backoffMs * 2 ** attempt);
  }

  /** Checks that the servers answer at all (GET /health/live), retrying connection errors for up to
   *  `withinMs`: a run is refused at once when none does, rather than waiting out each tile's
   *  deadline. Returns the servers that did not answer when others did. */
  async reachable(withinMs = 10_000): Promise<string[]> {
    const deadline = Date.now() + withinMs;
    const reasons = new Map<Server, string>();
    const answered = new Set<Server>();
    for (let attempt = 0; ; attempt++) {
      await Promise.all(
        this.servers
          .filter((s) => !answered.has(s))
          .map(async (s) => {
            try {
              const res = await s.pool.request({
                method: 'GET',
                path: '/health/live',
                headersTimeout: Math.max(1000, deadline - Date.now()),
                bodyTimeout: 5000,
              });
              await res.body.dump();
              answered.add(s);
            } catch (err) {
              reasons.set(s, (err as NodeJS.ErrnoException).code ?? (err as Error).message);
            }
          }),
      );
      if (answered.size === this.servers.length || (answered.size && attempt >= 1) || Date.now() >= deadline) break;
      await sleep(Math.min(1000, 250 * 2 ** attempt, Math.max(0, deadline - Date.now())));
    }
    const silent = this.servers.filter((s) => !answered.has(s)).map((s) => `${s.url} (${reasons.get(s)})`);
    if (!answered.size)
      throw new TileClientError(
        'TILE_ERR_CLIENT_UNREACHABLE',
        `cannot reach ${silent.join(', ')} within ${Math.round(withinMs / 1000)} s; is the service running there?`,
      );
    return silent;
  }

  metadata(model: string): Promise<ModelMetadataBody> {
    return this.call('GET', `/api/metadata/${encodeURIComponent(model)}`);
  }

  /** Posts one tile's request to an endpoint path such as `/api/embed/tile-embed` (query
   *  included): the contract's JSON object, or a body made ahead (tile-body.ts). */
  async infer(path: string, request: TileRequest | MadeBody): Promise<TileResponseBody> {
    const out = 'bytes' in request ? outgoing(path, request) : { path, body: Buffer.from(JSON.stringify(request)) };
    const release = await this.slots.acquire();
    try {
      return await this.call<TileResponseBody>('POST', path, out);
    } finally {
      release();
    }
  }

  /** Posts one tile given as pixels or PNG bytes, in the body the server an attempt goes to takes
   *  best for the path's model: raw RGB pixels, the PNG file, or the contract's JSON (always,
   *  for fields too long for a query). A PNG is made from pixels only for a server that needs
   *  one, once. */
  async inferTile(path: string, tile: TileInput): Promise<TileResponseBody> {
    const { width, height } = tile.fields;
    if (tile.rgb && tile.rgb.length !== width * height * 3)
      throw new UsageError(
        'TILE_ERR_CLIENT_USAGE',
        `raw pixels of a ${width}x${height} tile are ${width * height * 3} bytes (uint8 RGB), not ${tile.rgb.length}`,
      );
    const model = modelOf(path);
    let png = tile.png;
    const pngOf = () => (png ??= encodeRgbPng(tile.rgb!, width, height));
    const bytes = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    const queryFits = tileQuery(tile.fields).length <= MAX_QUERY;
    const release = await this.slots.acquire();
    try {
      return await this.call<TileResponseBody>('POST', path, async (server) => {
        const takes = model && queryFits ? (await this.bodyTypesOf(server)).get(model) : undefined;
        if (tile.rgb && takes?.has('application/octet-stream'))
          return outgoing(path, { type: 'application/octet-stream', bytes: bytes(tile.rgb), fields: tile.fields });
        if (takes?.has('image/png'))
          return outgoing(path, { type: 'image/png', bytes: bytes(pngOf()), fields: tile.fields });
        return outgoing(path, {
          type: 'application/json',
          bytes: tileRequestBody(pngOf(), tile.fields),
          fields: tile.fields,
        });
      });
    } finally {
      release();
    }
  }

  /** The bodies every server takes for an endpoint path's model (the contract's JSON at least):
   *  what a caller that makes bodies ahead (tile-infer's reader threads) may make. */
  async bodyTypes(path: string): Promise<Set<TileBodyType>> {
    const model = modelOf(path);
    const each = await Promise.all(
      this.servers.map(async (s) => (model ? (await this.bodyTypesOf(s)).get(model) : undefined) ?? new Set<string>()),
    );
    return new Set(
      TILE_BODY_TYPES.filter((type) => type === 'application/json' || each.every((takes) => takes.has(type))),
    );
  }

  /** The bodies each of a server's models takes, from its GET /api/models (read once); none for a
   *  server that does not say (an older one: JSON only), or with `bodies: 'json'`. A server that
   *  cannot be asked now is asked again on the next tile. */
  private bodyTypesOf(server: Server): Promise<Map<string, Set<string>>> {
    if (this.options.bodies === 'json') return Promise.resolve(new Map());
    server.bodyTypes ??= (async () => {
      const res = await server.pool.request({
        method: 'GET',
        path: '/api/models',
        headersTimeout: 10_000,
        bodyTimeout: 10_000,
      });
      const text = await res.body.text();
      // A 5xx (under pressure, a balancer with no backend up) says nothing of the bodies: ask again.
      if (res.statusCode >= 500) throw new Error(`GET /api/models: ${res.statusCode}`);
      const takes = new Map<string, Set<string>>();
      let models: { name: string; content_types?: string[] }[] = [];
      try {
        if (res.statusCode === 200) models = (JSON.parse(text) as { models?: typeof models }).models ?? [];
      } catch {
        // not the list: the server says nothing of its bodies
      }
      for (const m of models) takes.set(m.name, new Set(m.content_types ?? []));
      return takes;
    })().catch(() => {
      server.bodyTypes = null;
      return new Map();
    });
    return server.bodyTypes;
  }

  async close(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.pool.close()));
  }
}
