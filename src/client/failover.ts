// Failover and retry over several servers: keep-alive connection pools (undici), each request to
// the least-busy healthy server, 503 (model loading, queue full, under pressure) and a proxy's 429
// answered by waiting Retry-After, exponential backoff with full jitter on connection errors and
// other 5xx (the server benched for its backoff while the request moves on), and a deadline per
// request across all its attempts.
import type { IncomingHttpHeaders } from 'node:http';
import { Pool } from 'undici';
import type { TileBodyType } from '../contract/endpoints.js';
import { TileClientError } from './tile-client-error.js';

/** How long a request may take and how its retries back off. */
export interface RetryPolicy {
  /** Give up on a tile after this long, retries included. */
  deadlineMs?: number;
  /** First backoff step; doubles per failed attempt up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Called on every retry (for progress displays). */
  onRetry?: (reason: string) => void;
}

export interface Server {
  url: string;
  pool: Pool;
  inFlight: number;
  /** Not chosen before this time (after a connection error or 5xx). */
  benchedUntil: number;
}

/** One attempt's request: where it goes and what it carries. */
export interface Outgoing {
  path: string;
  body?: Buffer;
  contentType?: TileBodyType;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Retry-After in seconds (the service sends integers); HTTP dates are honoured too. */
export function retryAfterMs(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

export class Failover {
  readonly servers: Server[];
  private readonly deadlineMs: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  retries = 0;
  /** The last retry's reason, until a request gets through again (for progress displays). */
  waiting: string | null = null;

  /** Each pool may open `connections` connections: with one server up, it takes all the load. */
  constructor(
    urls: readonly string[],
    connections: number,
    private readonly policy: RetryPolicy,
  ) {
    this.servers = urls.map((url) => ({
      url: url.replace(/\/$/, ''),
      pool: new Pool(url, { connections, pipelining: 1, keepAliveTimeout: 30_000 }),
      inFlight: 0,
      benchedUntil: 0,
    }));
    this.deadlineMs = policy.deadlineMs ?? 300_000;
    this.backoffMs = policy.backoffMs ?? 100;
    this.maxBackoffMs = policy.maxBackoffMs ?? 5_000;
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
    this.policy.onRetry?.(reason);
  }

  /** One request with retries; resolves with the parsed JSON body of the first 2xx. `request`
   *  is the same for every server, or made for the server an attempt goes to. */
  async call<T>(
    method: 'GET' | 'POST',
    path: string,
    request: Outgoing | ((server: Server) => Promise<Outgoing>) = { path },
  ): Promise<T> {
    return (await this.answer<T>(method, path, request)).body;
  }

  /** call, with the answer's headers. */
  async answer<T>(
    method: 'GET' | 'POST',
    path: string,
    request: Outgoing | ((server: Server) => Promise<Outgoing>) = { path },
  ): Promise<{ body: T; headers: IncomingHttpHeaders }> {
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
          return { body: JSON.parse(text) as T, headers: res.headers };
        }
        if (res.statusCode === 503 || res.statusCode === 429) {
          // Loading or queue full (or, from a proxy in front, 429 Too Many Requests): the server
          // says when to come back; that is not a failure of the server, so it stays eligible.
          wait = retryAfterMs(res.headers['retry-after']) ?? this.backoff(attempt);
          reason = `${res.statusCode} ${text.slice(0, 80)}`;
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

  async close(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.pool.close()));
  }
}
