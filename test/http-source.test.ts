// A slide's HTTP range requests against a server that misbehaves (no real server does so on
// demand: Node's own, here): one that never answers, one that stops mid-body, one that trickles a
// byte at a time within the idle timeout, one that cuts its first answer short. Before, undici's
// 300 s timeouts held a run about 20 minutes on the first two (the third forever, at any idle
// timeout), and a body cut short failed the slide at once with "other side closed", no code, no URL.
import type { IncomingMessage, ServerResponse } from 'node:http';
import t from 'tap';
import { HttpTransport } from '../src/client/slide/remote/http-source.js';
import { BLOCK } from '../src/client/slide/remote/source.js';
import { misbehavingServer, pour, trickle } from './helpers/misbehaving-server.js';

const file = Buffer.from(Array.from({ length: 3 * BLOCK }, (_, i) => (i * 31) % 251));
/** Requests seen, by path. */
const seen = new Map<string, number>();

function answer(req: IncomingMessage, res: ServerResponse): void {
  const path = req.url!;
  const n = (seen.get(path) ?? 0) + 1;
  seen.set(path, n);
  const [, a, b] = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '')!.map(Number);
  const part = file.subarray(a, b + 1);
  const head = { 'content-range': `bytes ${a}-${b}/${file.length}`, 'content-length': part.length, etag: '"1"' };
  if (path === '/stall.tif') return; // never answers
  // A 206 whose body pours on past the range asked for (cut after 64 MiB).
  if (path === '/pour.tif') {
    res.writeHead(206, { 'content-range': head['content-range'] });
    return pour(res, 'application/octet-stream', 64);
  }
  res.writeHead(206, head);
  if (path === '/stall-body.tif') return void res.write(part.subarray(0, 10));
  // A byte every 0.3 s, each within the 0.5 s idle timeout, never the whole answer.
  if (path === '/trickle.tif') return trickle(res, part, 300);
  // The first answer ends 10 bytes early, its connection closed.
  if (path === '/cut-once.tif' && n === 1)
    return void res.end(part.subarray(0, part.length - 10), () => req.socket.destroy());
  res.end(part);
}

const url = await misbehavingServer((fn) => t.teardown(fn), answer);
const timeouts = { headersMs: 500, bodyMs: 500, minBytesPerSecond: 64 * 1024 };

t.test(
  'no headers, a body that stops or one that trickles: retried, then TILE_ERR_SLIDE_REMOTE naming the URL',
  async (t) => {
    const started = performance.now();
    const [stall, stallBody, trickle] = await Promise.all(
      ['/stall.tif', '/stall-body.tif', '/trickle.tif'].map((path) =>
        HttpTransport.open(url(path), timeouts).catch((err: Error) => err),
      ),
    );
    t.match(stall, {
      code: 'TILE_ERR_SLIDE_REMOTE',
      message: `${url('/stall.tif')}: no answer within 0.5 s (after 3 retries)`,
    });
    t.match(stallBody, {
      code: 'TILE_ERR_SLIDE_REMOTE',
      message: `${url('/stall-body.tif')}: the answer stopped for 0.5 s mid-body (after 3 retries)`,
    });
    // Each byte comes within the idle timeout: only the least rate (1.5 s for 64 KiB at 64 KiB/s,
    // after 0.5 s of slack) ends it.
    t.match(trickle, {
      code: 'TILE_ERR_SLIDE_REMOTE',
      message: `${url('/trickle.tif')}: the answer came slower than 64 KiB/s (${BLOCK} bytes not whole 1.5 s after its headers) (after 3 retries)`,
    });
    t.same(
      [seen.get('/stall.tif'), seen.get('/stall-body.tif'), seen.get('/trickle.tif')],
      [4, 4, 4],
      'four tries each',
    );
    const seconds = (performance.now() - started) / 1000;
    t.ok(seconds < 20, `${seconds.toFixed(1)} s (4 tries, 4.2 s of pauses)`);
  },
);

t.test('a body cut short is tried again, as a failed connection is', async (t) => {
  const http = await HttpTransport.open(url('/cut-once.tif'), timeouts);
  t.equal(http.size, file.length);
  t.ok(Buffer.from(http.first).equals(file.subarray(0, BLOCK)), 'the first block whole');
  t.equal(seen.get('/cut-once.tif'), 2, 'the second try');
});

t.test('a range answer that runs past the bytes asked for is refused there, not buffered', async (t) => {
  const err = await HttpTransport.open(url('/pour.tif'), timeouts).catch((e: Error) => e);
  t.match(err, {
    code: 'TILE_ERR_SLIDE_REMOTE',
    message: `${url('/pour.tif')}: the answer to a range of ${BLOCK} bytes runs past them (Content-Length not given); not read further`,
  });
  t.equal(seen.get('/pour.tif'), 1, 'one try: a server that sends more than asked is not asked again');
});
