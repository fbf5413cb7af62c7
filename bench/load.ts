// Drives one endpoint over keep-alive HTTP with autocannon, rotating through distinct tiles, and
// reads the server's own stage and batch metrics around the run.
import autocannon from 'autocannon';
import { withQuery } from '../src/client/tile-body.js';

export interface LoadResult {
  concurrency: number;
  seconds: number;
  tilesPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  /** The errors by what they were: each non-2xx status, and "socket" and "timeout". */
  errorKinds: Record<string, number>;
  /** The same of the warm-up before the run (where a burst's first refusals fall). */
  warmUpErrorKinds: Record<string, number>;
  meanBatch: number;
  /** Mean milliseconds per tile in each server stage. */
  stages: Record<string, number>;
}

type Sums = Map<string, { sum: number; count: number }>;

async function scrape(url: string, model: string): Promise<Sums> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const sums: Sums = new Map();
  const line = /^(tile_stage_seconds|model_batch_size)_(sum|count)\{([^}]*)\} (\S+)$/gm;
  for (const m of text.matchAll(line)) {
    const labels = Object.fromEntries([...m[3].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    if (labels.model !== model) continue;
    const key = m[1] === 'model_batch_size' ? 'batch' : labels.stage;
    const entry = sums.get(key) ?? { sum: 0, count: 0 };
    entry[m[2] as 'sum' | 'count'] = Number(m[4]);
    sums.set(key, entry);
  }
  return sums;
}

function delta(before: Sums, after: Sums, key: string): number {
  const a = after.get(key);
  const b = before.get(key) ?? { sum: 0, count: 0 };
  if (!a || a.count === b.count) return 0;
  return (a.sum - b.sum) / (a.count - b.count);
}

/** How long a run lasts: a time, or (the smoke run, whose results must not depend on the
 *  machine's load) a number of requests per connection. */
export type Span = { seconds: number } | { perConnection: number };

/** A request body: a JSON text, or a binary tile body (image/png, application/octet-stream) with
 *  the query that carries its fields. */
export type BenchBody = string | { type: string; body: Buffer; query: string };

function request(
  path: string,
  body: BenchBody,
): { path: string; headers: Record<string, string>; body: string | Buffer } {
  if (typeof body === 'string') return { path, headers: { 'content-type': 'application/json' }, body };
  return { path: withQuery(path, body.query), headers: { 'content-type': body.type }, body: body.body };
}

/** How autocannon gets its requests: 'per request' (the default) builds each as it is sent, the
 *  bodies taken in turn across connections; 'prebuilt' builds them once and each connection cycles
 *  through them. Building copies the body twice (autocannon's request builder), which for 4.8 MB
 *  bodies is most of the load generator's CPU, on the cores the service shares. */
export type Building = 'per request' | 'prebuilt';

/** autocannon's client, the parts of it that closeWhenAsked replaces. */
type CannonClient = {
  on(event: 'headers', listener: (info: { shouldKeepAlive?: boolean }) => void): unknown;
  _doRequest(): void;
  _resetConnection(): void;
};

/** A response that says `Connection: close` ends its connection before the next request, as
 *  HTTP/1.1 asks of a client (a front over its share of connections closes some:
 *  src/front/connection-share.ts). autocannon would write the next request on it and count its
 *  reset as an error. */
function closeWhenAsked(client: CannonClient): void {
  let closing = false;
  client.on('headers', (info) => {
    closing = info.shouldKeepAlive === false;
  });
  const send = client._doRequest.bind(client);
  client._doRequest = () => {
    if (!closing) return send();
    closing = false;
    client._resetConnection();
  };
}

export function fire(
  url: string,
  path: string,
  bodies: BenchBody[],
  concurrency: number,
  span: Span,
  { headers = {}, building = 'per request' }: { headers?: Record<string, string>; building?: Building } = {},
): Promise<autocannon.Result> {
  let next = 0;
  const built = (body: BenchBody) => {
    const r = request(path, body);
    return { ...r, headers: { ...headers, ...r.headers } };
  };
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: url + path,
        connections: concurrency,
        pipelining: 1,
        setupClient: (client) => closeWhenAsked(client as unknown as CannonClient),
        ...('seconds' in span ? { duration: span.seconds } : { amount: span.perConnection * concurrency }),
        timeout: 60,
        requests:
          building === 'prebuilt'
            ? bodies.map((body) => ({ method: 'POST' as const, ...built(body) }))
            : [
                {
                  method: 'POST',
                  setupRequest: (req) => {
                    const r = built(bodies[next++ % bodies.length]);
                    return { ...req, ...r, headers: { ...req.headers, ...r.headers } };
                  },
                },
              ],
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
  });
}

/** A short run first: JIT, batcher, caches. */
export const warmUp = (span: Span): Span => ('seconds' in span ? { seconds: Math.min(2, span.seconds) } : span);

export async function drive(
  url: string,
  model: string,
  path: string,
  bodies: BenchBody[],
  concurrency: number,
  span: Span,
  headers: Record<string, string> = {},
): Promise<LoadResult> {
  // Prebuilt: the generator shares the service's cores, and building each request cost it 0.15
  // of its 0.55 CPU ms a gene-expr tile (JSON bodies of 224 px tiles).
  const options = { headers, building: 'prebuilt' } as const;
  const warm = await fire(url, path, bodies, concurrency, warmUp(span), options);
  const before = await scrape(url, model);
  const result = await fire(url, path, bodies, concurrency, span, options);
  const seconds = result.duration;
  const after = await scrape(url, model);
  const stages: Record<string, number> = {};
  for (const key of after.keys()) if (key !== 'batch') stages[key] = delta(before, after, key) * 1000;
  const ok = result.requests.total - result.non2xx;
  return {
    concurrency,
    seconds,
    tilesPerSec: ok / seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: errorCount(result),
    errorKinds: errorKinds(result),
    warmUpErrorKinds: errorKinds(warm),
    meanBatch: delta(before, after, 'batch'),
    stages,
  };
}

/** Requests that got no 2xx answer: autocannon's `errors` (connection errors, timeouts included)
 *  and its non-2xx answers. */
export const errorCount = (result: autocannon.Result) => result.errors + result.non2xx;

/** An autocannon result's errors by kind, so that a report says "503: 6395" rather than a count. */
export function errorKinds(result: autocannon.Result): Record<string, number> {
  const kinds: Record<string, number> = {};
  for (const [status, { count = 0 }] of Object.entries(result.statusCodeStats ?? {}))
    if (!status.startsWith('2') && count) kinds[status] = count;
  if (result.errors - result.timeouts > 0) kinds.socket = result.errors - result.timeouts;
  if (result.timeouts) kinds.timeout = result.timeouts;
  return kinds;
}
