// DICOMweb (PS3.18): a slide is a series URL, …/studies/UID/series/UID. Its instances' metadata by
// WADO-RS …/metadata (application/dicom+json), its frames by …/instances/UID/frames/N,M,...
// (multipart/related, JPEG asked for in its own transfer syntax so that the server sends the
// stored bytes, never transcoded), a band's frames of one instance in one request. A study URL
// expands to its series of modality SM by QIDO-RS. Requests carry
// TILE_INFER_DICOMWEB_AUTHORIZATION as their Authorization header when it is set; 5xx answers and
// connection errors are retried with backoff; 401, 403 and 404 fail at once, naming the URL.
import type { CodesOf } from '../../../lib/errors.js';
import { SlideError, type FrameBytes } from '../slide.js';
import { jsonAttrs, type JsonDataSet } from './attributes.js';
import { byInstance, type FrameAt, type FrameSource } from './dicom-slide.js';
import { EXPLICIT_LE, frameBytes, JPEG_BASELINE, type Instance } from './pyramid.js';
import { bodyDeadlineMs, REMOTE_TIMEOUTS, type RemoteTimeouts } from '../remote/source.js';

export const AUTH_ENV = 'TILE_INFER_DICOMWEB_AUTHORIZATION';
const URL_PATTERN = /^(https?:\/\/.+?)\/studies\/([^/?#]+)(?:\/series\/([^/?#]+))?\/?$/;
/** Tries of a request that fails with a 5xx or a connection error, and the first wait between. */
const TRIES = 5;
const BACKOFF_MS = 200;

export interface DicomWebUrl {
  base: string;
  study: string;
  series: string | null;
}

export function parseDicomWebUrl(url: string): DicomWebUrl | null {
  const m = URL_PATTERN.exec(url);
  return m ? { base: m[1], study: decodeURIComponent(m[2]), series: m[3] ? decodeURIComponent(m[3]) : null } : null;
}

export const seriesUrl = (u: DicomWebUrl, series: string) => `${u.base}/studies/${u.study}/series/${series}`;

const failure = (code: CodesOf<'SLIDE'>, message: string) => new SlideError(code, message);

/** The most an answer may hold (`bytes`), and what it was asked for, in words (`what`): a server
 *  whose body never ends, or far outgrows what was asked, is cut there, not buffered without end. */
export interface AnswerLimit {
  bytes: number;
  what: string;
}

/** A metadata or search answer's limit: V8's longest string is 2^29 - 24 characters, so a larger
 *  one could not be parsed as JSON anyway. */
export const METADATA_LIMIT: AnswerLimit = { bytes: 256 * 1024 * 1024, what: 'a DICOM JSON answer' };

/** A frames answer's limit: each frame at twice its pixels' bytes (a compressed frame is smaller
 *  than its pixels, JPEG of noise at quality 100 near them) plus 4 KiB (its part's headers, JPEG
 *  markers and tables), and 64 KiB more for the whole. */
export const framesLimit = (frames: number, instance: Instance): AnswerLimit => ({
  bytes: frames * (2 * frameBytes(instance) + 4096) + 64 * 1024,
  what: `${frames} frame${frames > 1 ? 's' : ''} of ${frameBytes(instance)} bytes of pixels each`,
});

/** A whole answer: its body, read within the timeouts, and its content type. */
export interface Answer {
  body: Buffer;
  contentType: string;
}

/** Why a fetch or a body read failed: undici's cause (ECONNREFUSED, "other side closed"). */
const reasonOf = (err: unknown) => {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message;
};

/** `response`'s body, failing when no piece of it comes for `timeouts.bodyMs` (`abort` ends the
 *  request), or when a piece comes past its deadline (bodyDeadlineMs of the bytes come so far: a
 *  frames answer's size is known only once read, a Content-Length could lie; `slow` says so and
 *  ends the request), checked as each piece comes, no timer more; and at once, not retried, when it
 *  runs past `limit` (a server's mistake, not a passing fault). */
async function readBody(
  url: string,
  response: Response,
  limit: AnswerLimit,
  timeouts: RemoteTimeouts,
  abort: () => void,
  slow: (bytes: number, seconds: number) => void,
): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  if (!response.body) return Buffer.alloc(0);
  const tooLarge = (said: string) =>
    failure(
      'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
      `${url}: its answer ${said}, more than the ${limit.bytes} bytes ${limit.what} may take; not read further`,
    );
  const length = Number(response.headers.get('content-length') ?? 0);
  if (length > limit.bytes) {
    await response.body.cancel().catch(() => {});
    throw tooLarge(`is ${length} bytes (its Content-Length)`);
  }
  const reader = response.body.getReader();
  const started = performance.now();
  let bytes = 0;
  let timer: NodeJS.Timeout | undefined;
  const idle = () => {
    clearTimeout(timer);
    timer = setTimeout(abort, timeouts.bodyMs);
  };
  try {
    idle();
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      chunks.push(r.value);
      bytes += r.value.length;
      if (bytes > limit.bytes) {
        await reader.cancel().catch(() => {});
        throw tooLarge(`came to ${bytes} bytes and on`);
      }
      const ms = performance.now() - started;
      if (ms > bodyDeadlineMs(bytes, timeouts)) {
        slow(bytes, ms / 1000);
        await reader.cancel().catch(() => {});
        throw new Error('too slow');
      }
      idle();
    }
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(chunks);
}

/** GET with the Authorization header, its body read whole up to `limit`; retried on 5xx,
 *  connection errors, a body cut short or too slow and the timeouts (`timeouts`: tests give
 *  shorter ones). */
export async function get(
  url: string,
  accept: string,
  limit: AnswerLimit,
  timeouts: RemoteTimeouts = REMOTE_TIMEOUTS,
): Promise<Answer> {
  const headers: Record<string, string> = { accept };
  const auth = process.env[AUTH_ENV];
  if (auth) headers.authorization = auth;
  let last = '';
  for (let attempt = 0; attempt < TRIES; attempt++) {
    if (attempt) await new Promise((r) => setTimeout(r, BACKOFF_MS * 2 ** (attempt - 1)));
    const controller = new AbortController();
    let stalled = '';
    let slow = '';
    const stall = (what: string) => () => {
      stalled = what;
      controller.abort();
    };
    let response: Response;
    const timer = setTimeout(stall(`no answer in ${timeouts.headersMs / 1000} s`), timeouts.headersMs);
    try {
      response = await fetch(url, { headers, signal: controller.signal });
    } catch (err) {
      last = stalled || reasonOf(err);
      continue;
    } finally {
      clearTimeout(timer);
    }
    if (response.ok) {
      try {
        const contentType = response.headers.get('content-type') ?? '';
        const tooSlow = (bytes: number, seconds: number) => {
          slow = `its body came slower than ${timeouts.minBytesPerSecond / 1024} KiB/s (${bytes} bytes in ${seconds.toFixed(1)} s after its headers, ${timeouts.bodyMs / 1000} s of them slack)`;
          controller.abort();
        };
        const idle = stall(`no body for ${timeouts.bodyMs / 1000} s`);
        return { body: await readBody(url, response, limit, timeouts, idle, tooSlow), contentType };
      } catch (err) {
        if (err instanceof SlideError) throw err;
        const cause = (err as { cause?: Error }).cause;
        last = slow || `its body cut short: ${stalled || cause?.message || (err as Error).message}`;
        continue;
      }
    }
    const status = `${response.status} ${response.statusText}`.trim();
    await response.body?.cancel();
    if (response.status >= 500) {
      last = status;
      continue;
    }
    if (response.status === 401 || response.status === 403) {
      throw failure(
        'TILE_ERR_SLIDE_DICOMWEB_AUTH',
        `${url}: ${status}: the DICOMweb server wants credentials; set ${AUTH_ENV} to the Authorization header it takes (e.g. "Bearer TOKEN")${auth ? ` (the one set was refused)` : ''}`,
      );
    }
    if (response.status === 404)
      throw failure(
        'TILE_ERR_SLIDE_DICOMWEB_NOT_FOUND',
        `${url}: ${status}: no such study, series, instance or frame on the DICOMweb server`,
      );
    throw failure('TILE_ERR_SLIDE_DICOMWEB_REFUSED', `${url}: ${status} (asked for ${accept})`);
  }
  throw failure(
    'TILE_ERR_SLIDE_DICOMWEB_DOWN',
    `${url}: the DICOMweb server did not answer after ${TRIES} tries (${last})`,
  );
}

/** A DICOM JSON answer (PS3.18 F.2): an array of data sets, else refused, naming what came. */
async function dataSets(url: string): Promise<JsonDataSet[]> {
  const { body, contentType } = await get(url, 'application/dicom+json', METADATA_LIMIT);
  const refused = (what: string) =>
    failure('TILE_ERR_SLIDE_DICOMWEB_REFUSED', `${url}: answered ${contentType || 'no content type'}: ${what}`);
  let sets: unknown;
  try {
    sets = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw refused(`not DICOM JSON (${(err as Error).message})`);
  }
  const isSet = (s: unknown) => typeof s === 'object' && s !== null && !Array.isArray(s);
  if (!Array.isArray(sets) || !sets.every(isSet))
    throw refused(
      `${Array.isArray(sets) ? 'an array of other than objects' : `a JSON ${sets === null ? 'null' : typeof sets}`}, expected DICOM JSON's array of data sets`,
    );
  return sets as JsonDataSet[];
}

/** The parts of a multipart/related body, in order (RFC 2046 framing). */
export function multipartParts(body: Buffer, contentType: string, url: string): Buffer[] {
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (!/^multipart\/related/i.test(contentType) || !boundary)
    throw failure(
      'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
      `${url}: answered ${contentType || 'no content type'}, expected multipart/related`,
    );
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const next = Buffer.from(`\r\n--${boundary[1] ?? boundary[2]}`);
  const parts: Buffer[] = [];
  let at = body.indexOf(delimiter);
  while (at >= 0 && body.toString('latin1', at + delimiter.length, at + delimiter.length + 2) !== '--') {
    const start = body.indexOf('\r\n\r\n', at) + 4;
    const end = body.indexOf(next, start);
    if (start < 4 || end < 0)
      throw failure('TILE_ERR_SLIDE_DICOMWEB_REFUSED', `${url}: a multipart/related body cut short`);
    parts.push(body.subarray(start, end));
    at = end + 2;
  }
  return parts;
}

export interface WebInstance extends Instance {
  url: string;
}

/** The series' instances, from its metadata. */
export async function seriesInstances(url: string): Promise<WebInstance[]> {
  return (await dataSets(`${url}/metadata`)).map((set) => {
    const attrs = jsonAttrs(set);
    const where = `${url}/instances/${attrs.text('00080018')}`;
    // The stored transfer syntax: the file meta's, which some servers add, or the one they offer
    // (AvailableTransferSyntaxUID); else JPEG baseline for frames that say ISO_10918_1 (Orthanc
    // gives neither). Nothing else is guessed: asked for the wrong one, a server transcodes.
    const jpeg = attrs.text('00282114') === 'ISO_10918_1' ? JPEG_BASELINE : undefined;
    return { attrs, where, url: where, transferSyntax: attrs.text('00020010') ?? attrs.text('00083002') ?? jpeg };
  });
}

/** The series URLs of a study's slides (modality SM). */
export async function studySeries(u: DicomWebUrl): Promise<string[]> {
  return (await dataSets(`${u.base}/studies/${u.study}/series?Modality=SM`))
    .map((s) => jsonAttrs(s).text('0020000E'))
    .filter((uid): uid is string => !!uid)
    .map((uid) => seriesUrl(u, uid));
}

/** What to ask frames for: their own transfer syntax (PS3.18 8.7.3). */
const acceptFor = (syntax: string) =>
  `multipart/related; type="${syntax === JPEG_BASELINE ? 'image/jpeg' : syntax === EXPLICIT_LE ? 'application/octet-stream' : 'image/jp2'}"; transfer-syntax=${syntax}`;

/** Frames a request asks for at most, and prefetched requests in flight: a WADO-RS frames request
 *  costs the server (Orthanc) about as much for 1 frame as for 32 (it reads the instance). From 48
 *  frames and 3 ahead to 200 and 2, bench:slide's DICOMweb source (3 pairs each, alternated):
 *  Orthanc's CPU over the runs 3.4 and 2.7 s -> 1.6 and 2.2 s, the ratio to the TIFF 0.80 and
 *  0.78 -> 0.93 and 1.03. 200 frame numbers keep the URL near 1 KB. */
const BATCH = 200;
const BATCHES_AHEAD = 2;

/** Frames over WADO-RS, the frames of one instance in one request. Told the frames to come
 *  (prefetch), it fetches them in batches ahead of their bands. */
export class DicomWebFrames implements FrameSource {
  /** Prefetched frames by "instance/frame", and the batches planned, in order. */
  private readonly ahead = new Map<string, Promise<FrameBytes>>();
  private batches: FrameAt[][] = [];
  private next = 0;

  constructor(private readonly instances: WebInstance[]) {}

  prefetch(at: FrameAt[]): void {
    this.batches = [];
    this.next = 0;
    for (const a of at) {
      const last = this.batches[this.batches.length - 1];
      if (last && last.length < BATCH && last[0].instance === a.instance) last.push(a);
      else this.batches.push([a]);
    }
  }

  /** Starts the batches up to BATCHES_AHEAD past the one holding `at`. */
  private fetchAhead(at: FrameAt): void {
    const k = this.batches.findIndex((b) => b.some((a) => a.instance === at.instance && a.frame === at.frame));
    if (k < 0) return;
    for (; this.next <= k + BATCHES_AHEAD && this.next < this.batches.length; this.next++) {
      const batch = this.batches[this.next];
      const fetched = this.fetch(batch);
      fetched.catch(() => {}); // awaited by the bands that need it
      batch.forEach((a, j) =>
        this.ahead.set(
          `${a.instance}/${a.frame}`,
          fetched.then((bytes) => bytes[j]),
        ),
      );
    }
  }

  async frames(at: FrameAt[]): Promise<FrameBytes[]> {
    if (at.length) this.fetchAhead(at[0]);
    const key = (a: FrameAt) => `${a.instance}/${a.frame}`;
    const rest = at.filter((a) => !this.ahead.has(key(a)));
    const fetched = rest.length ? this.fetch(rest) : Promise.resolve([]);
    return Promise.all(
      at.map(async (a) => {
        const early = this.ahead.get(key(a));
        if (!early) return (await fetched)[rest.indexOf(a)];
        this.ahead.delete(key(a));
        return early;
      }),
    );
  }

  private async fetch(at: FrameAt[]): Promise<FrameBytes[]> {
    const out: FrameBytes[] = new Array(at.length);
    await Promise.all(
      [...byInstance(at)].map(async ([instance, ks]) => {
        const url = `${this.instances[instance].url}/frames/${ks.map((k) => at[k].frame + 1).join(',')}`;
        const accept = acceptFor(this.instances[instance].transferSyntax!);
        const { body, contentType } = await get(url, accept, framesLimit(ks.length, this.instances[instance]));
        const parts = multipartParts(body, contentType, url);
        if (parts.length !== ks.length)
          throw failure(
            'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
            `${url}: ${parts.length} frames in the answer, asked for ${ks.length}`,
          );
        // Each its own copy: a view would take the whole body with it to the reader pool.
        ks.forEach((k, j) => (out[k] = { bytes: new Uint8Array(parts[j]) }));
      }),
    );
    return out;
  }

  async close(): Promise<void> {}
}
