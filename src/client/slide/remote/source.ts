// A slide's bytes where they live, read by byte range: what a reader needs of a remote file
// (HTTP, S3) so that it reads only the bytes it uses. Every reader can take one (the TIFF reader
// does; a DICOM reader can). Reads go through a bounded cache of fetched extents: small reads
// (headers, directories, tag values) fetch a whole aligned block around them, so that parsing a
// file's directories costs a few requests; large ones (tiles) fetch exactly what they ask.
import { SlideError } from '../slide.js';

/** How a transport fetches: [offset, offset + length) of the object, checked to be the version
 *  it first saw (`etag`), else an error. */
export interface RangeTransport {
  /** The URL as the user gave it. */
  readonly url: string;
  readonly size: number;
  /** The object's version as the server names it (ETag), or '' when it gives none. */
  readonly etag: string;
  /** The object's first bytes (up to BLOCK), fetched when it was opened. */
  readonly first: Uint8Array;
  /** The bytes the server sent for the range (the source checks that they are all of it). */
  fetch(offset: number, length: number): Promise<Uint8Array>;
  close(): void;
}

/** How long a remote slide's server (HTTP ranges, S3, DICOMweb) may take before a request is tried
 *  again: its answer's headers (headersMs), a pause in its body (bodyMs), and the whole body after
 *  its headers, which must come within bodyMs plus its bytes at minBytesPerSecond (bodyDeadlineMs).
 *  Undici's and fetch's defaults (300 s each) held a run 20 minutes and more, retries and all, on a
 *  server that stopped answering, and the idle timeout alone bounds only the gap between pieces:
 *  a server sending a byte every 29 s held a request forever. 64 KiB/s (0.5 Mbit/s) is far below
 *  any link a slide is read over (a 64 KiB block: 31 s; a few MiB of a level's tiles, or a batch
 *  of 200 DICOM frames, a minute or two), and bodyMs of slack lets a body pause once as long as the
 *  idle timeout allows. No option of tile-infer sets them (its --deadline is the service's); tests
 *  give shorter ones. */
export const REMOTE_TIMEOUTS = { headersMs: 30_000, bodyMs: 30_000, minBytesPerSecond: 64 * 1024 };
export type RemoteTimeouts = typeof REMOTE_TIMEOUTS;

/** How long a body of `bytes` may take after its headers (REMOTE_TIMEOUTS). */
export const bodyDeadlineMs = (bytes: number, timeouts: RemoteTimeouts): number =>
  timeouts.bodyMs + Math.ceil((bytes / timeouts.minBytesPerSecond) * 1000);

/** A remote read's timeouts as its errors say them (HTTP ranges, S3; DICOMweb says its own). */
export const timedOut = {
  headers: (t: RemoteTimeouts) => `no answer within ${t.headersMs / 1000} s`,
  idle: (t: RemoteTimeouts) => `the answer stopped for ${t.bodyMs / 1000} s mid-body`,
  slow: (bytes: number, t: RemoteTimeouts) =>
    `the answer came slower than ${t.minBytesPerSecond / 1024} KiB/s (${bytes} bytes not whole ${bodyDeadlineMs(bytes, t) / 1000} s after its headers)`,
};

/** Retries of a remote read whose failure may pass (HTTP ranges, S3): no connection, no answer in
 *  time, a body idle, too slow or cut short, a 5xx; after these pauses. */
export const BACKOFF_MS = [200, 1000, 3000];

/** An attempt's failure that may pass when tried again, in words (`retried` tries it again). */
export class MayPass extends Error {}

/** `attempt` tried again after each of BACKOFF_MS's pauses while it fails with MayPass, then
 *  TILE_ERR_SLIDE_REMOTE naming `url`, the last failure and the retries; anything else it throws
 *  (a SlideError: a 404, an answer running past its range) is final. */
export async function retried<T>(url: string, attempt: () => Promise<T>): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof MayPass)) throw err;
      if (n === BACKOFF_MS.length)
        throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: ${err.message} (after ${n} retries)`);
    }
    await new Promise((r) => setTimeout(r, BACKOFF_MS[n]));
  }
}

/** A body read up to `limit` bytes (the range asked for): `null` once more comes. A server whose
 *  body pours on past what was asked is cut there, not buffered without end (the deadlines bound
 *  only a slow one). The bytes are an array of their own, never a view into Node's shared pool. */
export async function readUpTo(body: AsyncIterable<Uint8Array>, limit: number): Promise<Uint8Array | null> {
  const chunks: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    length += chunk.length;
    if (length > limit) return null;
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) at += (bytes.set(chunk, at), chunk.length);
  return bytes;
}

/** What a remote read that ran past its range says (HTTP ranges, S3). */
export const ranPast = (expected: number, contentLength: unknown) =>
  `the answer to a range of ${expected} bytes runs past them (Content-Length ${String(contentLength ?? 'not given')}); not read further`;

/** Reads below this are rounded out to aligned blocks of it (and cached). */
export const BLOCK = 64 * 1024;
/** Fetched bytes kept by default, per source (a slide's file; DICOM instances keep less). */
export const CACHE_BYTES = 32 * 1024 * 1024;
/** Ranges with less than this between them are fetched in one request (the gap is read). */
const MERGE_GAP = 2048;

interface Extent {
  offset: number;
  data: Uint8Array;
}

export class ByteSource {
  /** Bytes fetched from the server so far. */
  fetched = 0;
  /** Requests made so far. */
  requests = 0;
  /** Extents in last-used order (a Map keeps insertion order). */
  private readonly cache = new Map<number, Extent>();
  private cached = 0;

  constructor(
    readonly transport: RangeTransport,
    private readonly cacheBytes = CACHE_BYTES,
  ) {
    this.keep(0, transport.first);
    this.fetched = transport.first.length;
    this.requests = 1;
  }

  get url() {
    return this.transport.url;
  }

  get size() {
    return this.transport.size;
  }

  get etag() {
    return this.transport.etag;
  }

  /** [offset, offset + length) clipped to the object: from the cache, else fetched. */
  async read(offset: number, length: number): Promise<Uint8Array> {
    const end = Math.min(this.size, offset + length);
    if (end <= offset) return new Uint8Array(0);
    const hit = this.lookup(offset, end);
    if (hit) return hit;
    const from = end - offset < BLOCK ? Math.floor(offset / BLOCK) * BLOCK : offset;
    const to = end - offset < BLOCK ? Math.min(this.size, Math.ceil(end / BLOCK) * BLOCK) : end;
    const data = await this.fetch(from, to - from);
    return data.subarray(offset - from, end - from);
  }

  /** Several ranges, each fetched at most once; neighbours share a request. */
  async readRanges(ranges: readonly (readonly [number, number])[]): Promise<Uint8Array[]> {
    const order = ranges.map((_, i) => i).sort((a, b) => ranges[a][0] - ranges[b][0]);
    const out: Uint8Array[] = new Array(ranges.length);
    const runs: { from: number; to: number; members: number[] }[] = [];
    for (const i of order) {
      const [offset, length] = ranges[i];
      // Nothing to fetch (a TIFF tile never written): a range request cannot even say it.
      if (length === 0) {
        out[i] = new Uint8Array(0);
        continue;
      }
      const hit = this.lookup(offset, offset + length);
      if (hit) {
        out[i] = hit;
        continue;
      }
      const last = runs[runs.length - 1];
      if (last && offset - last.to <= MERGE_GAP) {
        last.to = Math.max(last.to, offset + length);
        last.members.push(i);
      } else runs.push({ from: offset, to: offset + length, members: [i] });
    }
    await Promise.all(
      runs.map(async ({ from, to, members }) => {
        const data = await this.fetch(from, Math.min(this.size, to) - from);
        for (const i of members) out[i] = data.subarray(ranges[i][0] - from, ranges[i][0] - from + ranges[i][1]);
      }),
    );
    return out;
  }

  private lookup(offset: number, end: number): Uint8Array | null {
    for (const [key, e] of this.cache) {
      if (e.offset <= offset && end <= e.offset + e.data.length) {
        this.cache.delete(key);
        this.cache.set(key, e);
        return e.data.subarray(offset - e.offset, end - e.offset);
      }
    }
    return null;
  }

  private async fetch(offset: number, length: number): Promise<Uint8Array> {
    this.requests++;
    const data = await this.transport.fetch(offset, length);
    if (data.length !== length)
      throw new SlideError(
        'TILE_ERR_SLIDE_REMOTE',
        `${this.transport.url}: asked for ${length} bytes at ${offset}, got ${data.length}`,
      );
    this.fetched += data.length;
    this.keep(offset, data);
    return data;
  }

  private keep(offset: number, data: Uint8Array): void {
    if (data.length <= this.cacheBytes) {
      this.cached -= this.cache.get(offset)?.data.length ?? 0;
      this.cache.delete(offset);
      this.cache.set(offset, { offset, data });
      this.cached += data.length;
      for (const [key, e] of this.cache) {
        if (this.cached <= this.cacheBytes) break;
        this.cache.delete(key);
        this.cached -= e.data.length;
      }
    }
  }

  close(): void {
    this.cache.clear();
    this.transport.close();
  }
}
