// An s3:// slide's ranged GetObject requests against an S3-shaped server that misbehaves (Node's
// own, as AWS_ENDPOINT_URL: no real store does so on demand; slide-remote.test.ts reads from a real
// one): one that never answers, one that stops mid-body, one that trickles a byte at a time. Before,
// the SDK's request handler had no timeouts at all: each held its slide forever.
import type { IncomingMessage, ServerResponse } from 'node:http';
import t from 'tap';
import { S3Transport } from '../src/client/slide/remote/s3-source.js';
import { BLOCK } from '../src/client/slide/remote/source.js';
import { misbehavingServer, pour, trickle } from './helpers/misbehaving-server.js';

const file = Buffer.from(Array.from({ length: 3 * BLOCK }, (_, i) => (i * 31) % 251));
/** Requests seen, by key. */
const seen = new Map<string, number>();

/** GetObject as S3 answers a Range (206, Content-Range, ETag), but for the keys that misbehave. */
function answer(req: IncomingMessage, res: ServerResponse): void {
  const key = new URL(req.url!, 'http://s3').pathname;
  seen.set(key, (seen.get(key) ?? 0) + 1);
  const [, a, b] = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '')!.map(Number);
  const part = file.subarray(a, b + 1);
  if (key === '/slides/stall.tif') return; // never answers
  // A 206 whose body pours on past the range asked for (cut after 64 MiB).
  if (key === '/slides/pour.tif') {
    res.writeHead(206, { 'content-range': `bytes ${a}-${b}/${file.length}`, etag: '"1"' });
    return pour(res, 'application/octet-stream', 64);
  }
  res.writeHead(206, {
    'content-range': `bytes ${a}-${b}/${file.length}`,
    'content-length': part.length,
    'content-type': 'application/octet-stream',
    etag: '"1"',
  });
  if (key === '/slides/stall-body.tif') return void res.write(part.subarray(0, 10));
  // A byte every 0.3 s, each within the 0.5 s idle timeout, never the whole answer.
  if (key === '/slides/trickle.tif') return trickle(res, part, 300);
  res.end(part);
}

const url = await misbehavingServer((fn) => t.teardown(fn), answer);
Object.assign(process.env, {
  AWS_ENDPOINT_URL: url(''),
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'test',
  AWS_SECRET_ACCESS_KEY: 'test',
});
const timeouts = { headersMs: 500, bodyMs: 500, minBytesPerSecond: 64 * 1024 };

/** `promise`, or an error if it takes more than 20 s (without timeouts it never ends). */
const within = <T>(promise: Promise<T>) =>
  Promise.race([
    promise,
    new Promise<never>((_, no) => setTimeout(() => no(new Error('still waiting after 20 s')), 20_000).unref()),
  ]);

t.test('a well-behaved range: the size, the ETag and the first block', async (t) => {
  const s3 = await S3Transport.open('s3://slides/ok.tif', timeouts);
  t.equal(s3.size, file.length);
  t.equal(s3.etag, '"1"');
  t.ok(Buffer.from(s3.first).equals(file.subarray(0, BLOCK)));
  t.ok(Buffer.from(await s3.fetch(BLOCK, 100)).equals(file.subarray(BLOCK, BLOCK + 100)), 'a later range');
});

t.test('no headers, a body that stops or one that trickles: TILE_ERR_SLIDE_REMOTE naming the URL', async (t) => {
  const started = performance.now();
  const [stall, stallBody, trickled] = await Promise.all(
    ['stall', 'stall-body', 'trickle'].map((name) =>
      within(S3Transport.open(`s3://slides/${name}.tif`, timeouts)).catch((err: Error) => err),
    ),
  );
  // The SDK retries a request that timed out (4 tries in all).
  t.match(stall, {
    code: 'TILE_ERR_SLIDE_REMOTE',
    message: 's3://slides/stall.tif: no answer within 0.5 s (after 3 retries)',
  });
  t.equal(seen.get('/slides/stall.tif'), 4, 'four tries');
  t.match(stallBody, {
    code: 'TILE_ERR_SLIDE_REMOTE',
    message: 's3://slides/stall-body.tif: the answer stopped for 0.5 s mid-body',
  });
  // Each byte comes within the idle timeout: only the least rate (1.5 s for 64 KiB at 64 KiB/s,
  // after 0.5 s of slack) ends it.
  t.match(trickled, {
    code: 'TILE_ERR_SLIDE_REMOTE',
    message: `s3://slides/trickle.tif: the answer came slower than 64 KiB/s (${BLOCK} bytes not whole 1.5 s after its headers)`,
  });
  const seconds = (performance.now() - started) / 1000;
  t.ok(seconds < 15, `${seconds.toFixed(1)} s`);
});

t.test('a range answer that runs past the bytes asked for is refused there, not buffered', async (t) => {
  const err = await within(S3Transport.open('s3://slides/pour.tif', timeouts)).catch((e: Error) => e);
  t.match(err, {
    code: 'TILE_ERR_SLIDE_REMOTE',
    message: `s3://slides/pour.tif: the answer to a range of ${BLOCK} bytes runs past them (Content-Length not given); not read further`,
  });
});
