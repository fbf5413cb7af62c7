// The tile client against scripted HTTP peers (plain node:http servers answering 503 with
// Retry-After, 500, 422, or nothing at all): retries, failover, deadlines, the concurrency limit.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { retryAfterMs, TileClient, TileClientError } from '../src/client/tile-client.js';
import { tileRequestBody } from '../src/client/pipeline/tile-body.js';

type Handler = (req: IncomingMessage, res: ServerResponse, n: number) => void;

async function peer(t: Test, handler: Handler): Promise<string> {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => handler(req, res, n++));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A port nothing listens on: a server opened and closed again. */
async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

const ok = (res: ServerResponse, body: object = { output: [1], slide_name: 's', x: 0, y: 0, width: 1, height: 1, patch_idx: 0 }) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
};
const tile = { image_data: 'AA==', slide_name: 's', x: 0, y: 0, width: 1, height: 1, patch_idx: 0 };

t.test('503 loading: waits Retry-After, then succeeds', async (t) => {
  const url = await peer(t, (_req, res, n) => (n === 0 ? res.writeHead(503, { 'retry-after': '1' }).end('{"status":"loading"}') : ok(res)));
  const client = new TileClient({ servers: [url], concurrency: 1 });
  t.teardown(() => client.close());
  const start = Date.now();
  const res = await client.infer('/api/predict/m', tile);
  t.same(res.output, [1]);
  t.equal(client.retries, 1);
  t.ok(Date.now() - start >= 950, `waited ${Date.now() - start} ms`);
});

t.test('500 and a dropped connection are retried with backoff', async (t) => {
  const url = await peer(t, (req, res, n) => (n === 0 ? res.writeHead(500).end('{"detail":"Internal server error"}') : n === 1 ? req.socket.destroy() : ok(res)));
  const client = new TileClient({ servers: [url], concurrency: 1, backoffMs: 20 });
  t.teardown(() => client.close());
  t.same((await client.infer('/api/predict/m', tile)).output, [1]);
  t.equal(client.retries, 2);
});

t.test('a server that refuses connections: the tile fails over to the other', async (t) => {
  const down = await closedPort();
  const up = await peer(t, (_req, res) => ok(res));
  // A backoff of up to 20 s: waiting it would show, however busy the machine.
  const client = new TileClient({ servers: [down, up], concurrency: 4, backoffMs: 20_000, maxBackoffMs: 20_000 });
  t.teardown(() => client.close());
  const start = Date.now();
  const results = await Promise.all(Array.from({ length: 6 }, () => client.infer('/api/predict/m', tile)));
  t.equal(results.length, 6);
  t.ok(client.retries >= 1, `${client.retries} retries`);
  t.ok(Date.now() - start < 5_000, `no backoff wait while another server is healthy (${Date.now() - start} ms)`);
});

t.test('422 is not retried and carries the body', async (t) => {
  const detail = { detail: [{ loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type' }] };
  const url = await peer(t, (_req, res) => res.writeHead(422, { 'content-type': 'application/json' }).end(JSON.stringify(detail)));
  const client = new TileClient({ servers: [url], concurrency: 1 });
  t.teardown(() => client.close());
  const err = (await client.infer('/api/predict/m', tile).catch((e) => e)) as TileClientError;
  t.ok(err instanceof TileClientError);
  t.equal(err.code, 'TILE_ERR_CLIENT_HTTP');
  t.equal(err.status, 422);
  t.same(err.body, detail);
  t.equal(client.retries, 0);
});

t.test('the deadline ends retries of a tile', async (t) => {
  // Retry-After 20 s against a 300 ms deadline: waiting it out would show, however busy the machine.
  const url = await peer(t, (_req, res) => res.writeHead(503, { 'retry-after': '20' }).end('{"detail":"queue full"}'));
  const client = new TileClient({ servers: [url], concurrency: 1, deadlineMs: 300 });
  t.teardown(() => client.close());
  const start = Date.now();
  const err = (await client.infer('/api/predict/m', tile).catch((e) => e)) as TileClientError;
  t.equal(err.code, 'TILE_ERR_CLIENT_DEADLINE');
  t.ok(Date.now() - start < 5_000, `gave up after ${Date.now() - start} ms`);
});

t.test('never more tiles in flight than the concurrency', async (t) => {
  let inFlight = 0;
  let most = 0;
  const url = await peer(t, (_req, res) => {
    most = Math.max(most, ++inFlight);
    setTimeout(() => {
      inFlight--;
      ok(res);
    }, 20);
  });
  const client = new TileClient({ servers: [url], concurrency: 3 });
  t.teardown(() => client.close());
  await Promise.all(Array.from({ length: 12 }, () => client.infer('/api/predict/m', tile)));
  t.equal(most, 3);
});

t.test('Retry-After in seconds or as an HTTP date', async (t) => {
  t.equal(retryAfterMs('2'), 2000);
  t.equal(retryAfterMs(undefined), null);
  const inAMinute = new Date(Date.now() + 60_000).toUTCString();
  t.ok(Math.abs(retryAfterMs(inAMinute)! - 60_000) < 1500);
});

t.test('a body made from the PNG bytes is the JSON of the request', async (t) => {
  const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 255, 7]);
  const fields = { slide_name: 'Schnitt-ä "1"', x: 448, y: 0, width: 224, height: 224, patch_idx: 3, tissue_ratio: null, resolution: 0.5 };
  t.equal(tileRequestBody(png, fields).toString('utf8'), JSON.stringify({ image_data: png.toString('base64'), ...fields }));
  // Posted as it is, with the JSON content type.
  let received = '';
  const server = createServer((req, res) => {
    t.equal(req.headers['content-type'], 'application/json');
    req.setEncoding('utf8');
    req.on('data', (d: string) => (received += d));
    req.on('end', () => ok(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const client = new TileClient({ servers: [`http://127.0.0.1:${(server.address() as AddressInfo).port}`], concurrency: 1 });
  t.teardown(() => client.close());
  await client.infer('/api/predict/m', tileRequestBody(png, fields));
  t.same(JSON.parse(received), { image_data: png.toString('base64'), ...fields });
});
