// A slide at an http:// or https:// URL, read by Range requests (RFC 9110). The first request
// asks for the first block: a 206 gives the size (Content-Range) and the ETag; a 200 is a server
// that ignores ranges, whose answer is dropped unread (the slide is never downloaded whole).
// Later requests carry If-Match, so a file replaced mid-run fails instead of mixing versions.
import { request, type Dispatcher } from 'undici';
import { SlideError } from '../slide.js';
import {
  BLOCK,
  bodyDeadlineMs,
  MayPass,
  ranPast,
  readUpTo,
  REMOTE_TIMEOUTS,
  retried,
  timedOut,
  type RangeTransport,
  type RemoteTimeouts,
} from './source.js';

type Answer = Dispatcher.ResponseData;

export class HttpTransport implements RangeTransport {
  private constructor(
    readonly url: string,
    readonly size: number,
    readonly etag: string,
    /** The first block, fetched to learn the size. */
    readonly first: Uint8Array,
    private readonly timeouts: RemoteTimeouts,
  ) {}

  static async open(url: string, timeouts = REMOTE_TIMEOUTS): Promise<HttpTransport> {
    const { res, data } = await send(url, { range: `bytes=0-${BLOCK - 1}` }, BLOCK, timeouts, async (res) => {
      if (res.statusCode === 200) {
        drop(res);
        throw new SlideError(
          'TILE_ERR_SLIDE_NO_RANGES',
          `${url}: the server answers a range request with the whole file (200, not 206 Partial Content): it does not serve byte ranges, and the slide is not downloaded whole; serve it from a server that does (nginx, Apache, S3) or copy it here`,
        );
      }
      return { res, data: await body(url, res, 206, BLOCK) };
    });
    const total = /\/(\d+)$/.exec(String(res.headers['content-range'] ?? ''));
    if (!total)
      throw new SlideError(
        'TILE_ERR_SLIDE_REMOTE',
        `${url}: a 206 without the size in Content-Range (${String(res.headers['content-range'])})`,
      );
    return new HttpTransport(url, Number(total[1]), String(res.headers.etag ?? ''), data, timeouts);
  }

  async fetch(offset: number, length: number): Promise<Uint8Array> {
    const headers: Record<string, string> = { range: `bytes=${offset}-${offset + length - 1}` };
    if (this.etag) headers['if-match'] = this.etag;
    return send(this.url, headers, length, this.timeouts, (res) => body(this.url, res, 206, length));
  }

  close(): void {}
}

/** What failed of a request, in words: undici's codes for the timeouts, else its own. */
function failed(err: Error, timeouts: RemoteTimeouts): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return timedOut.headers(timeouts);
  if (code === 'UND_ERR_BODY_TIMEOUT') return timedOut.idle(timeouts);
  if (code === 'UND_ERR_SOCKET') return `the connection closed before the answer was whole (${err.message})`;
  return code ?? err.message;
}

/** Requests `url` (`bytes` asked for) and reads its answer with `read`, retrying what may pass (no
 *  connection, a timeout, a body too slow or cut short, a 5xx); what `read` decides (a SlideError)
 *  is final. */
async function send<T>(
  url: string,
  headers: Record<string, string>,
  bytes: number,
  timeouts: RemoteTimeouts,
  read: (res: Answer) => Promise<T>,
): Promise<T> {
  return retried(url, async () => {
    // One timer an attempt, set when the headers come: the body's deadline (REMOTE_TIMEOUTS).
    const controller = new AbortController();
    let deadline: NodeJS.Timeout | undefined;
    try {
      const res = await request(url, {
        headers,
        headersTimeout: timeouts.headersMs,
        bodyTimeout: timeouts.bodyMs,
        signal: controller.signal,
      });
      deadline = setTimeout(() => controller.abort(), bodyDeadlineMs(bytes, timeouts));
      if (res.statusCode < 500) return await read(res);
      drop(res);
      throw new MayPass(`HTTP ${res.statusCode}`);
    } catch (err) {
      if (err instanceof SlideError || err instanceof MayPass) throw err;
      throw new MayPass(controller.signal.aborted ? timedOut.slow(bytes, timeouts) : failed(err as Error, timeouts));
    } finally {
      clearTimeout(deadline);
    }
  });
}

/** Closes an answer's connection without reading its body (a destroyed body's error is
 *  expected, not a crash). */
function drop(res: Answer): void {
  res.body.on('error', () => {});
  res.body.destroy();
}

/** How much of an error answer is read for its reason (a longer one is left unsaid). */
const REASON_BYTES = 4096;

/** The body of an answer that should have `status` and at most `expected` bytes (the range asked
 *  for), else the error it means. */
async function body(url: string, res: Answer, status: number, expected: number): Promise<Uint8Array> {
  if (res.statusCode === status) {
    const bytes = await readUpTo(res.body, expected);
    if (bytes) return bytes;
    drop(res);
    throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: ${ranPast(expected, res.headers['content-length'])}`);
  }
  // A plain-text or XML error says why (S3-compatible servers, proxies); an HTML page does not.
  const html = /html/i.test(String(res.headers['content-type'] ?? ''));
  const reason = html ? (drop(res), null) : await readUpTo(res.body, REASON_BYTES).catch(() => null);
  const text = Buffer.from(reason ?? [])
    .toString('utf8')
    .slice(0, 200)
    .replace(/\s+/g, ' ')
    .trim();
  const said = `HTTP ${res.statusCode}${text ? `: ${text}` : ''}`;
  if (res.statusCode === 404 || res.statusCode === 410)
    throw new SlideError('TILE_ERR_SLIDE_MISSING', `${url}: not found (${said})`);
  if (res.statusCode === 401 || res.statusCode === 403)
    throw new SlideError('TILE_ERR_SLIDE_DENIED', `${url}: the server refuses it (${said})`);
  if (res.statusCode === 412)
    throw new SlideError(
      'TILE_ERR_SLIDE_REMOTE',
      `${url}: the file changed while it was read (If-Match: its ETag is no longer the one it had); run again`,
    );
  const moved = res.headers.location ? `, to ${String(res.headers.location)}` : '';
  throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: expected ${status}, got ${said}${moved}`);
}
