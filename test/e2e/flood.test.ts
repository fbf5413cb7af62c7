// A connection flood (issue: ~1,100 stalled connections exhausted file descriptors and took the
// whole service down): with a lowered open-file limit, hundreds of connections that send headers
// and part of a body and then stall, or open gRPC's HTTP/2 and idle. The service stays up, closes
// them itself, and serves.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { freePort } from '../helpers/tile-infer.js';

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

t.test(`${FLOOD} idle connections to the gRPC port of a front with ${FD_LIMIT} file descriptors`, async (t) => {
  const grpcPort = await freePort();
  const server = await startServer({
    models: [{ name: 'tile-embed' }],
    config: { fronts: 1, grpc_port: grpcPort, front: { keep_alive_timeout_ms: 6000 } },
    fdLimit: FD_LIMIT,
  });
  t.teardown(() => server.stop());
  const sockets: Socket[] = [];
  let closedByServer = 0;
  for (let i = 0; i < FLOOD; i++) {
    const socket = connect(grpcPort, '127.0.0.1');
    socket.on('error', () => {});
    socket.resume();
    socket.on('close', () => closedByServer++);
    // RFC 9113 3.4: the client's connection preface, then nothing (no SETTINGS, no stream).
    socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    sockets.push(socket);
  }
  // The open-file limit less 128, halved between HTTP and gRPC: 64 held, the rest closed at once.
  await server.waitFor(() => closedByServer >= FLOOD - 64, 3000);
  t.ok(closedByServer >= FLOOD - 64, `${closedByServer} closed at once`);
  const during = await server.post('/api/embed/tile-embed', tileRequest(cellularPng(1)));
  t.equal(during.status, 200, 'HTTP serves during the flood');
  // Those held are let go as idle keep-alive connections are (front.keep_alive_timeout_ms).
  await server.waitFor(() => closedByServer === FLOOD, 30000);
  t.equal(closedByServer, FLOOD, 'the service closed every idle connection itself');
  t.notOk(
    server.lines.some((l) => /exited; restarting|HTTP front exited/.test(String(l.msg))),
    'no process died',
  );
  for (const s of sockets) s.destroy();
});
