// A connection flood (issue: ~1,100 stalled connections exhausted file descriptors and took the
// whole service down): with a lowered open-file limit, hundreds of connections that send headers
// and part of a body and then stall. The service stays up, closes them itself, and serves after.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';

const FD_LIMIT = 256;
const FLOOD = 600;

t.test(`${FLOOD} stalled connections against a front with ${FD_LIMIT} file descriptors`, async (t) => {
  const server = await startServer({
    models: [{ name: 'tile-embed' }],
    config: { fronts: 1, front: { headers_timeout_ms: 1000, body_timeout_ms: 2000 } },
    fdLimit: FD_LIMIT,
  });
  t.teardown(() => server.stop());
  const { port } = new URL(server.url);
  const sockets: Socket[] = [];
  let closedByServer = 0;
  for (let i = 0; i < FLOOD; i++) {
    const socket = connect(Number(port), '127.0.0.1');
    socket.on('error', () => {});
    socket.resume();
    socket.on('close', () => closedByServer++);
    // Headers announce a 1 MB body; 10 bytes of it come, then nothing.
    socket.write(
      `POST /api/embed/tile-embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{"image_da`,
    );
    sockets.push(socket);
  }
  // The body deadline (2 s, checked every second) closes every stalled connection.
  await server.waitFor(() => closedByServer === FLOOD, 30000);
  t.equal(closedByServer, FLOOD, 'the service closed every stalled connection itself');
  t.equal(server.proc.exitCode, null, 'the supervisor is alive');
  const res = await server.post('/api/embed/tile-embed', tileRequest(cellularPng(1)));
  t.equal(res.status, 200, 'and serves a normal request after the flood');
  t.notOk(
    server.lines.some((l) => /exited; restarting|HTTP front exited/.test(String(l.msg))),
    'no process died',
  );
  for (const s of sockets) s.destroy();
});
