// A slide at s3://bucket/key, read by ranged GetObject through the AWS SDK: its own credential
// chain (environment, profiles, SSO, instance and container roles) and endpoint settings
// (AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3 for S3-compatible stores, which are then addressed
// path-style: bucket names are rarely in their DNS). Ranges carry IfMatch with the ETag the first
// one saw, so an object replaced mid-run fails instead of mixing versions.
import type { S3Client } from '@aws-sdk/client-s3';
import type { Readable } from 'node:stream';
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

type Sdk = typeof import('@aws-sdk/client-s3');
/** A client by its timeouts: REMOTE_TIMEOUTS' alone in a run, a test's own beside it. */
const clients = new Map<RemoteTimeouts, Promise<{ sdk: Sdk; client: S3Client }>>();

/** One client for every slide: its connections and credentials are reused. The SDK loads with
 *  the first s3:// slide (160 ms, every tile-infer start otherwise). Its request handler keeps
 *  REMOTE_TIMEOUTS as the HTTP range reader does (the SDK's own default waits without end): a
 *  connection within headersMs, the answer's headers within headersMs of the request
 *  (requestTimeout, cleared when they come; thrown, not only logged), and no pause of bodyMs on
 *  the socket (socketTimeout); the SDK retries each as a TimeoutError until the headers come (a
 *  body's failures are past its retries: `get` retries them). */
function s3(timeouts: RemoteTimeouts): Promise<{ sdk: Sdk; client: S3Client }> {
  let shared = clients.get(timeouts);
  if (!shared) {
    shared = import('@aws-sdk/client-s3')
      .then((sdk) => ({
        sdk,
        client: new sdk.S3Client({
          forcePathStyle: Boolean(process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL),
          followRegionRedirects: true,
          maxAttempts: 4,
          requestHandler: {
            connectionTimeout: timeouts.headersMs,
            requestTimeout: timeouts.headersMs,
            throwOnRequestTimeout: true,
            socketTimeout: timeouts.bodyMs,
          },
        }),
      }))
      .catch((err: unknown) => {
        // The next slide tries again.
        clients.delete(timeouts);
        throw err;
      });
    clients.set(timeouts, shared);
  }
  return shared;
}

export class S3Transport implements RangeTransport {
  private constructor(
    readonly url: string,
    private readonly bucket: string,
    private readonly key: string,
    readonly size: number,
    readonly etag: string,
    readonly first: Uint8Array,
    private readonly timeouts: RemoteTimeouts,
  ) {}

  /** `timeouts`: tests give shorter ones. */
  static async open(url: string, timeouts = REMOTE_TIMEOUTS): Promise<S3Transport> {
    const { bucket, key } = parts(url);
    const res = await get({ url, bucket, key, timeouts }, 0, BLOCK);
    const total = /\/(\d+)$/.exec(res.contentRange ?? '');
    if (!total)
      throw new SlideError(
        'TILE_ERR_SLIDE_REMOTE',
        `${url}: a ranged GetObject without the object's size (Content-Range ${res.contentRange})`,
      );
    return new S3Transport(url, bucket, key, Number(total[1]), res.etag ?? '', res.body, timeouts);
  }

  async fetch(offset: number, length: number): Promise<Uint8Array> {
    const { url, bucket, key, timeouts } = this;
    const res = await get({ url, bucket, key, timeouts }, offset, length, this.etag || undefined);
    return res.body;
  }

  close(): void {}
}

/** The objects of an s3:// folder (the keys right under the URL's prefix up to its last '/', not
 *  in its subfolders, as a local folder is read), as s3:// URLs in key order: a DICOM series kept
 *  as one object per instance (as the Imaging Data Commons keeps them). Objects too small to be a
 *  DICOM file (a folder marker, an empty .keep) are left out. */
export async function listS3Folder(url: string): Promise<string[]> {
  const { bucket, key } = parts(url, true);
  const prefix = key.slice(0, key.lastIndexOf('/') + 1);
  const urls: string[] = [];
  let token: string | undefined;
  do {
    const page = await call(url, REMOTE_TIMEOUTS, (sdk, client) =>
      client.send(
        new sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, Delimiter: '/', ContinuationToken: token }),
      ),
    );
    for (const o of page.Contents ?? [])
      if (o.Key && !o.Key.endsWith('/') && (o.Size ?? 0) >= 132) urls.push(`s3://${bucket}/${o.Key}`);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return urls.sort();
}

/** An s3:// URL's bucket and key (`folder`: the key may be a prefix, even empty). */
function parts(url: string, folder = false): { bucket: string; key: string } {
  const m = (folder ? /^s3:\/\/([^/]+)\/(.*)$/ : /^s3:\/\/([^/]+)\/(.+)$/).exec(url);
  if (!m)
    throw new SlideError(
      'TILE_ERR_SLIDE_MISSING',
      `${url}: not an S3 ${folder ? 'folder' : 'object'} URL (expected s3://BUCKET/${folder ? 'PREFIX/' : 'KEY'})`,
    );
  return { bucket: m[1], key: m[2] };
}

/** A ranged GetObject of [offset, offset + length), its body read inside the call within
 *  bodyDeadlineMs of its headers (the socket's idle timeout alone let a server sending a byte a
 *  second hold a request forever). A body idle, too slow or cut short is tried again as an HTTP
 *  range's is (`retried`): the SDK's own retries end with the headers. */
const get = (
  o: { url: string; bucket: string; key: string; timeouts: RemoteTimeouts },
  offset: number,
  length: number,
  etag?: string,
) =>
  retried(o.url, () =>
    call(
      o.url,
      o.timeouts,
      async (sdk, client) => {
        const res = await client.send(
          new sdk.GetObjectCommand({
            Bucket: o.bucket,
            Key: o.key,
            Range: `bytes=${offset}-${offset + length - 1}`,
            IfMatch: etag,
          }),
        );
        let slow = false;
        const deadline = setTimeout(
          () => {
            slow = true;
            (res.Body as Readable).destroy(new Error('too slow'));
          },
          bodyDeadlineMs(length, o.timeouts),
        );
        try {
          const body = await readUpTo(res.Body as Readable, length);
          if (!body) throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${o.url}: ${ranPast(length, res.ContentLength)}`);
          return { contentRange: res.ContentRange, etag: res.ETag, body };
        } catch (err) {
          if (err instanceof SlideError) throw err;
          throw new MayPass(
            slow
              ? timedOut.slow(length, o.timeouts)
              : (err as Error).name === 'TimeoutError'
                ? timedOut.idle(o.timeouts)
                : `the connection closed before the answer was whole (${(err as Error).message})`,
          );
        } finally {
          clearTimeout(deadline);
        }
      },
      etag,
    ),
  );

/** An S3 request, its failures as slide errors naming the URL. */
async function call<T>(
  url: string,
  timeouts: RemoteTimeouts,
  request: (sdk: Sdk, client: S3Client) => Promise<T>,
  etag?: string,
): Promise<T> {
  let sdk: Sdk | null = null;
  try {
    const s = await s3(timeouts);
    sdk = s.sdk;
    return await request(sdk, s.client);
  } catch (err) {
    if (err instanceof SlideError || err instanceof MayPass) throw err;
    if (!sdk || !(err instanceof sdk.S3ServiceException)) {
      // The request handler's timeouts, retried by the SDK: before the answer's headers.
      const retries = ((err as { $metadata?: { attempts?: number } }).$metadata?.attempts ?? 1) - 1;
      const why = (err as Error).name === 'TimeoutError' ? timedOut.headers(timeouts) : (err as Error).message;
      throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: ${why}${retries ? ` (after ${retries} retries)` : ''}`);
    }
    const status = err.$metadata.httpStatusCode;
    const said = `S3 ${err.name}${status ? ` (HTTP ${status})` : ''}: ${err.message}`;
    if (status === 404) throw new SlideError('TILE_ERR_SLIDE_MISSING', `${url}: not found (${said})`);
    if (status === 401 || status === 403)
      throw new SlideError(
        'TILE_ERR_SLIDE_DENIED',
        `${url}: access refused (${said}); credentials come from the AWS SDK's chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, roles)`,
      );
    if (status === 412)
      throw new SlideError(
        'TILE_ERR_SLIDE_REMOTE',
        `${url}: the object changed while it was read (IfMatch: its ETag is no longer ${etag}); run again`,
      );
    throw new SlideError('TILE_ERR_SLIDE_REMOTE', `${url}: ${said}`);
  }
}
