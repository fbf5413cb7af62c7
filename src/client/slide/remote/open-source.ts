// Which slide paths are remote, and their byte sources.
import { HttpTransport } from './http-source.js';
import { S3Transport } from './s3-source.js';
import { ByteSource } from './source.js';

const REMOTE = /^(https?|s3):\/\//i;

/** Whether a slide path is a URL read by range requests (http, https, s3). */
export const isRemote = (path: string) => REMOTE.test(path);

/** A remote slide's bytes, opened with one request for its first block; `cacheBytes`: its block
 *  cache (source.ts' CACHE_BYTES by default). */
export async function openSource(url: string, cacheBytes?: number): Promise<ByteSource> {
  return new ByteSource(/^s3:/i.test(url) ? await S3Transport.open(url) : await HttpTransport.open(url), cacheBytes);
}
