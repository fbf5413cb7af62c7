// A slide at an http:// or https:// URL, read by Range requests (RFC 9110). The first request
// asks for the first block: a 206 gives the size (Content-Range) and the ETag; a 200 is a server
// that ignores ranges, whose answer is dropped unread (the slide is never downloaded whole).
// Later requests carry If-Match, so a file replaced mid-run fails instead of mixing versions.
import { request, type Dispatcher } from 'undici';
import { SlideError } from '../slide.js';
import { BLOCK, type RangeTransport } from './source.js';

/** Retries of a request that failed to connect or got a 5xx, after these pauses. */
const BACKOFF_MS = [200, 1000, 3000];

type Answer = Dispatcher.ResponseData;

export class HttpTransport implements RangeTransport {
  private constructor(
    readonly url: string,
    readonly size: number,
    readonly etag: string,
    /** The first block, fetched to learn the size. */
    readonly first: Uint8Array,
  ) {}

  static async open(url: string): Promise<HttpTransport> {
    const res = await send(url, { range: `bytes=0-${BLOCK - 1}` });
    if (res.statusCode === 200) {
      drop(res);
      throw new SlideError(
        'TILE_ERR_SLIDE_NO_RANGES',
        `${url}: the server answers a range request with the whole file (200, not 206 Partial Content): it does not serve byte ranges, and the slide is not downloaded whole; serve it from a server that does (nginx, Apache, S3) or copy it here`,
      );
    }
    const data = await body(url, res, 206);
    const total = /\/(\d+)$/.exec(String(res.headers['content-range'] ?? ''));
    if (!total)
      throw new SlideError(
        'TILE_ERR_SLIDE_REMOTE',
        `${url}: a 206 without the size in Content-Range (${String(res.headers['content-range'])})`,
      );
    return new HttpTransport(url, Number(total[1]), String(res.headers.etag ?? ''), data);
  }

  async fetch(offset: number, length: number): Promise<Uint8Array> {
    const headers: Record<string, string> = { range: `bytes=${offset}-${offset + length - 1}` };
    if (this.etag) headers['if-match'] = this.etag;
    const res = await send(this.url, headers);
    return body(this.url, res, 206);
  }

  close(): void {}
}

async function send(url: string, headers: Record<string, string>): Promise<Answer> {
  for (let attempt = 0; ; attempt++) {
    let failure: string;
    try {
      const res = await request(url, { headers });
      if (res.statusCode < 500) return res;
      drop(res);
      failure = `HTTP ${res.statusCode}`;
    } catch (err) {
      failure = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    }
    if (attempt === BACKOFF_MS.length)
      throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: ${failure} (after ${attempt} retries)`);
    await new Promise((r) => setTimeout(r, BACKOFF_MS[attempt]));
  }
}

/** Closes an answer's connection without reading its body (a destroyed body's error is
 *  expected, not a crash). */
function drop(res: Answer): void {
  res.body.on('error', () => {});
  res.body.destroy();
}

/** The body of an answer that should have `status`, else the error it means. */
async function body(url: string, res: Answer, status: number): Promise<Uint8Array> {
  if (res.statusCode === status) return new Uint8Array(await res.body.arrayBuffer());
  // A plain-text or XML error says why (S3-compatible servers, proxies); an HTML page does not.
  const html = /html/i.test(String(res.headers['content-type'] ?? ''));
  const text = html
    ? (drop(res), '')
    : (await res.body.text().catch(() => '')).slice(0, 200).replace(/\s+/g, ' ').trim();
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
