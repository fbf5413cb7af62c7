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
import type { TileBodyType } from '../contract/endpoints.js';
import { encodeRgbPng } from '../tile/png-write.js';
import { Semaphore } from './semaphore.js';

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

export type TileFields = Omit<TileRequest, 'image_data'>;

/** A tile for inferTile: its fields, and its image as raw pixels (uint8 RGB, row-major, width x
 *  height x 3 bytes) or as PNG bytes. */
export type TileInput = { fields: TileFields } & ({ rgb: Uint8Array; png?: undefined } | { png: Uint8Array; rgb?: undefined });

/** An answer the client will not retry (4xx) or a tile that ran out of time. */
export class TileClientError extends Error {
  constructor(
    message: string,
    readonly code: 'HTTP_STATUS' | 'DEADLINE',
    readonly status?: number,
    readonly body?: unknown,
  ) {
    super(message);
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
  body?: string | Buffer;
  contentType?: string;
}

/** The JSON body of a tile request as bytes, the PNG's base64 written straight into it: the same
 *  JSON as JSON.stringify of the request with image_data first, without a ~200 KB string being
 *  scanned for escapes and then encoded again on the way to the socket (0.4 instead of 1.3 CPU-ms
 *  for a 224x224 tile stored as PNG). */
export function tileRequestBody(png: Uint8Array, fields: Omit<TileRequest, 'image_data'>): Buffer {
  const base64 = Buffer.from(png.buffer, png.byteOffset, png.byteLength).toString('base64');
  const head = '{"image_data":"';
  const rest = JSON.stringify(fields);
  const tail = rest === '{}' ? '"}' : `",${rest.slice(1)}`;
  const body = Buffer.allocUnsafe(head.length + base64.length + Buffer.byteLength(tail));
  body.write(head, 0, 'latin1');
  body.write(base64, head.length, 'latin1');
  body.write(tail, head.length + base64.length, 'utf8');
  return body;
}

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

  constructor(private readonly options: ClientOptions) {
    if (!options.servers.length) throw new Error('at least one server URL is needed');
    // Each pool may open as many connections as there are slots: with one server up, it takes
    // all the load.
    this.servers = options.servers.map((url) => ({ url: url.replace(/\/$/, ''), pool: new Pool(url, { connections: options.concurrency, pipelining: 1, keepAliveTimeout: 30_000 }), inFlight: 0, benchedUntil: 0, bodyTypes: null }));
    this.slots = new Semaphore(options.concurrency);
    this.deadlineMs = options.deadlineMs ?? 300_000;
    this.backoffMs = options.backoffMs ?? 100;
    this.maxBackoffMs = options.maxBackoffMs ?? 5_000;
  }

  /** The healthy server with the fewest tiles in flight; when all are benched, the one back first. */
  private pick(): Server {
    const now = Date.now();
    const healthy = this.servers.filter((s) => s.benchedUntil <= now);
    const candidates = healthy.length ? healthy : [...this.servers].sort((a, b) => a.benchedUntil - b.benchedUntil).slice(0, 1);
    return candidates.reduce((best, s) => (s.inFlight < best.inFlight ? s : best));
  }

  private retry(reason: string): void {
    this.retries++;
    this.options.onRetry?.(reason);
  }

  /** One request with retries; resolves with the parsed JSON body of the first 2xx. `request`
   *  is the same for every server, or made for the server an attempt goes to. */
  private async call<T>(method: 'GET' | 'POST', path: string, request: Outgoing | ((server: Server) => Promise<Outgoing>) = { path }): Promise<T> {
    const deadline = Date.now() + this.deadlineMs;
    let reason = '';
    for (let attempt = 0; ; attempt++) {
      const server = this.pick();
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new TileClientError(`${method} ${path}: no answer within the ${this.deadlineMs} ms deadline${reason && ` (last: ${reason})`}`, 'DEADLINE');
      let wait: number;
      server.inFlight++;
      try {
        const out = typeof request === 'function' ? await request(server) : request;
        const res = await server.pool.request({
          method,
          path: out.path,
          body: out.body,
          headers: out.body ? { 'content-type': out.contentType ?? 'application/json' } : {},
          headersTimeout: remaining,
          bodyTimeout: remaining,
        });
        const text = await res.body.text();
        if (res.statusCode < 300) return JSON.parse(text) as T;
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
          throw new TileClientError(`${method} ${server.url}${path}: ${res.statusCode} ${text.slice(0, 500)}`, 'HTTP_STATUS', res.statusCode, parsed);
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

  metadata(model: string): Promise<ModelMetadataBody> {
    return this.call('GET', `/api/metadata/${encodeURIComponent(model)}`);
  }

  /** Posts one tile to an endpoint path such as `/api/embed/tile-embed` (query included): the
   *  request, or its JSON body already made (tileRequestBody). */
  async infer(path: string, request: TileRequest | Buffer): Promise<TileResponseBody> {
    const release = await this.slots.acquire();
    try {
      return await this.call<TileResponseBody>('POST', path, { path, body: Buffer.isBuffer(request) ? request : JSON.stringify(request) });
    } finally {
      release();
    }
  }

  /** Posts one tile given as pixels or PNG bytes, in the body the server an attempt goes to takes
   *  best for the path's model: raw RGB pixels, the PNG file, or the contract's JSON. A PNG is
   *  made from pixels only for a server that needs one, once. */
  async inferTile(path: string, tile: TileInput): Promise<TileResponseBody> {
    const { width, height } = tile.fields;
    if (tile.rgb && tile.rgb.length !== width * height * 3) throw new Error(`raw pixels of a ${width}x${height} tile are ${width * height * 3} bytes (uint8 RGB), not ${tile.rgb.length}`);
    const model = /^\/api\/(?:predict|embed)\/([^/?]+)/.exec(path)?.[1];
    let png = tile.png;
    const pngOf = () => (png ??= encodeRgbPng(tile.rgb!, width, height));
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(tile.fields)) if (value !== null && value !== undefined) query.set(key, Array.isArray(value) ? value.join(',') : String(value));
    const binary = (body: Uint8Array, contentType: TileBodyType): Outgoing => ({ path: `${path}${path.includes('?') ? '&' : '?'}${query}`, body: Buffer.from(body.buffer, body.byteOffset, body.byteLength), contentType });
    const release = await this.slots.acquire();
    try {
      return await this.call<TileResponseBody>('POST', path, async (server) => {
        const takes = model && this.options.bodies !== 'json' ? (await this.bodyTypesOf(server)).get(decodeURIComponent(model)) : undefined;
        if (tile.rgb && takes?.has('application/octet-stream')) return binary(tile.rgb, 'application/octet-stream');
        if (takes?.has('image/png')) return binary(pngOf(), 'image/png');
        return { path, body: tileRequestBody(pngOf(), tile.fields) };
      });
    } finally {
      release();
    }
  }

  /** The bodies each of a server's models takes, from its GET /api/models (read once); none for a
   *  server that does not say (an older one: JSON only). A server that cannot be asked now is
   *  asked again on the next tile. */
  private bodyTypesOf(server: Server): Promise<Map<string, Set<string>>> {
    server.bodyTypes ??= (async () => {
      const res = await server.pool.request({ method: 'GET', path: '/api/models', headersTimeout: 10_000, bodyTimeout: 10_000 });
      const text = await res.body.text();
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
