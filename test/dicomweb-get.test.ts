// A DICOMweb request against a server that trickles its body a byte at a time, each byte within the
// idle timeout, and one whose body pours on without end (Node's own server: no real one does so on
// demand; dicomweb-faults.test.ts plays the other faults before a real Orthanc). Before,
// readBody's idle timer was reset by each byte and the request never ended; and an endless body
// was buffered without bound.
import type { IncomingMessage, ServerResponse } from 'node:http';
import t from 'tap';
import { get, METADATA_LIMIT } from '../src/client/slide/dicom/dicomweb.js';
import { misbehavingServer, pour, trickle } from './helpers/misbehaving-server.js';

const body = Buffer.from(Array.from({ length: 4096 }, (_, i) => i % 251));
/** Requests seen, by path. */
const seen = new Map<string, number>();
/** Tries of /trickle-once that trickle before the body is sent whole. */
const TRICKLED = 1;

function answer(req: IncomingMessage, res: ServerResponse): void {
  const path = req.url!;
  const n = (seen.get(path) ?? 0) + 1;
  seen.set(path, n);
  if (path === '/endless') return pour(res, 'application/octet-stream', 256);
  if (path === '/lying') {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': 2 ** 40 });
    return pour(res, 'application/octet-stream', 256);
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
  // A byte every 0.3 s, each within the 0.5 s idle timeout, never the whole answer.
  if (path === '/trickle' || (path === '/trickle-once' && n <= TRICKLED)) return trickle(res, body, 300);
  res.end(body);
}

const url = await misbehavingServer((fn) => t.teardown(fn), answer);
const timeouts = { headersMs: 500, bodyMs: 500, minBytesPerSecond: 64 * 1024 };

t.test('a body that trickles within the idle timeout: cut at the least rate, retried, then named', async (t) => {
  const started = performance.now();
  const [once, always] = await Promise.all([
    get(url('/trickle-once'), '*/*', METADATA_LIMIT, timeouts),
    get(url('/trickle'), '*/*', METADATA_LIMIT, timeouts).catch((err: Error) => err),
  ]);
  t.ok(once.body.equals(body), 'trickled once: retried, the whole body');
  t.equal(seen.get('/trickle-once'), TRICKLED + 1);
  t.match(always, {
    code: 'TILE_ERR_SLIDE_DICOMWEB_DOWN',
    message: new RegExp(
      `^${url('/trickle')}: the DICOMweb server did not answer after 5 tries \\(its body came slower than 64 KiB/s \\(\\d bytes in 0\\.\\d s after its headers, 0\\.5 s of them slack\\)\\)$`,
    ),
  });
  t.equal(seen.get('/trickle'), 5, 'five tries');
  const seconds = (performance.now() - started) / 1000;
  t.ok(seconds < 15, `${seconds.toFixed(1)} s (5 tries of about 0.6 s, 3 s of pauses)`);
});

t.test('a body without an end, or a Content-Length past the limit: refused at once, not retried', async (t) => {
  const limit = { bytes: 3 << 20, what: '2 frames of 786432 bytes of pixels each' };
  const started = performance.now();
  await t.rejects(get(url('/endless'), '*/*', limit, timeouts), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: new RegExp(
      `^${url('/endless')}: its answer came to \\d+ bytes and on, more than the 3145728 bytes 2 frames of 786432 bytes of pixels each may take; not read further$`,
    ),
  });
  t.equal(seen.get('/endless'), 1, 'one try: a server sending too much is not a passing fault');
  await t.rejects(get(url('/lying'), '*/*', limit, timeouts), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: `${url('/lying')}: its answer is 1099511627776 bytes (its Content-Length), more than the 3145728 bytes 2 frames of 786432 bytes of pixels each may take; not read further`,
  });
  const seconds = (performance.now() - started) / 1000;
  t.ok(seconds < 5, `${seconds.toFixed(1)} s`);
});
