// A range server that misbehaves by the file name asked for (no real server does so on demand:
// Node's own), and the checks a remote slide's range reader (HTTP ranges, S3 GetObject) must pass
// against it: the two read the same way, so they are held to the same checks. Each name: stall.tif
// never answers; stall-body.tif stops mid-body; trickle.tif sends a byte every 0.3 s, each within
// the idle timeout, never the whole answer; cut-once.tif ends its first answer 10 bytes early;
// pour.tif pours on past the range asked for (cut after 64 MiB).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Test } from 'tap';
import { BLOCK, type RangeTransport } from '../../src/client/slide/remote/source.js';
import { pour, trickle } from './misbehaving-server.js';

export const rangeFile = Buffer.from(Array.from({ length: 3 * BLOCK }, (_, i) => (i * 31) % 251));
/** The readers' timeouts against it: short, so that 4 tries of each fault take seconds. */
export const faultTimeouts = { headersMs: 500, bodyMs: 500, minBytesPerSecond: 64 * 1024 };
/** Requests seen, by file name. */
export const seen = new Map<string, number>();

/** Answers a range of rangeFile as a server with ranges does (206, Content-Range, Content-Length,
 *  ETag "1"), or misbehaves as its name says. */
export function answerRange(req: IncomingMessage, res: ServerResponse): void {
  const name = new URL(req.url!, 'http://x').pathname.split('/').pop()!;
  const n = (seen.get(name) ?? 0) + 1;
  seen.set(name, n);
  const [, a, b] = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '')!.map(Number);
  const part = rangeFile.subarray(a, b + 1);
  const range = `bytes ${a}-${b}/${rangeFile.length}`;
  if (name === 'stall.tif') return;
  if (name === 'pour.tif') {
    res.writeHead(206, { 'content-range': range, etag: '"1"' });
    return pour(res, 'application/octet-stream', 64);
  }
  res.writeHead(206, {
    'content-range': range,
    'content-length': part.length,
    'content-type': 'application/octet-stream',
    etag: '"1"',
  });
  if (name === 'stall-body.tif') return void res.write(part.subarray(0, 10));
  if (name === 'trickle.tif') return trickle(res, part, 300);
  if (name === 'cut-once.tif' && n === 1)
    return void res.end(part.subarray(0, part.length - 10), () => req.socket.destroy());
  res.end(part);
}

/** `promise`, or an error if it takes more than 20 s (without timeouts it never ends). */
const within = <T>(promise: Promise<T>) =>
  Promise.race([
    promise,
    new Promise<never>((_, no) => setTimeout(() => no(new Error('still waiting after 20 s')), 20_000).unref()),
  ]);

/** A reader: opens the file of a name at faultTimeouts, and says its URL. */
export interface Reader {
  open(name: string): Promise<RangeTransport>;
  url(name: string): string;
}

/** The faults checked, as subtests of `t`. */
export function checkFaults(t: Test, reader: Reader): void {
  const failure = (name: string) => within(reader.open(name)).catch((err: Error) => err);

  t.test(
    'no headers, a body that stops or one that trickles: retried, then TILE_ERR_SLIDE_REMOTE naming the URL',
    async (t) => {
      const started = performance.now();
      const [stall, stallBody, trickled] = await Promise.all(
        ['stall.tif', 'stall-body.tif', 'trickle.tif'].map(failure),
      );
      t.match(stall, {
        code: 'TILE_ERR_SLIDE_REMOTE',
        message: `${reader.url('stall.tif')}: no answer within 0.5 s (after 3 retries)`,
      });
      t.match(stallBody, {
        code: 'TILE_ERR_SLIDE_REMOTE',
        message: `${reader.url('stall-body.tif')}: the answer stopped for 0.5 s mid-body (after 3 retries)`,
      });
      // Each byte comes within the idle timeout: only the least rate (1.5 s for 64 KiB at 64 KiB/s,
      // after 0.5 s of slack) ends it.
      t.match(trickled, {
        code: 'TILE_ERR_SLIDE_REMOTE',
        message: `${reader.url('trickle.tif')}: the answer came slower than 64 KiB/s (${BLOCK} bytes not whole 1.5 s after its headers) (after 3 retries)`,
      });
      t.same(
        [seen.get('stall.tif'), seen.get('stall-body.tif'), seen.get('trickle.tif')],
        [4, 4, 4],
        'four tries each',
      );
      const seconds = (performance.now() - started) / 1000;
      t.ok(seconds < 20, `${seconds.toFixed(1)} s (4 tries, 4.2 s of pauses)`);
    },
  );

  t.test('a body cut short is tried again, as a failed connection is', async (t) => {
    const source = await within(reader.open('cut-once.tif'));
    t.equal(source.size, rangeFile.length);
    t.ok(Buffer.from(source.first).equals(rangeFile.subarray(0, BLOCK)), 'the first block whole');
    t.equal(seen.get('cut-once.tif'), 2, 'the second try');
  });

  t.test('a range answer that runs past the bytes asked for is refused there, not buffered', async (t) => {
    t.match(await failure('pour.tif'), {
      code: 'TILE_ERR_SLIDE_REMOTE',
      message: `${reader.url('pour.tif')}: the answer to a range of ${BLOCK} bytes runs past them (Content-Length not given); not read further`,
    });
    t.equal(seen.get('pour.tif'), 1, 'one try: a server that sends more than asked is not asked again');
  });
}
