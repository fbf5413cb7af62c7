// The tile client against scripted HTTP peers (plain node:http servers answering 503 with
// Retry-After, 500, 422, or nothing at all): retries, failover, deadlines, the concurrency limit;
// and the body it chooses for each server, against peers and the service's app.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import type { TileInput } from '../src/client/body-choice.js';
import { retryAfterMs } from '../src/client/failover.js';
import { TileClient, type ClientOptions } from '../src/client/tile-client.js';
import { TileClientError } from '../src/client/tile-client-error.js';
import type { TileFields } from '../src/contract/schemas.js';
import { tileRequestBody } from '../src/client/tile-body.js';
import { encodeRgbPng } from '../src/tile/png-write.js';
import { decodePng } from '../src/tile/png.js';
import { fakeService } from './helpers/fake-backend.js';
import { cellularPng, tileRequest } from './helpers/tiles.js';

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

const ok = (
  res: ServerResponse,
  body: object = { output: [1], slide_name: 's', x: 0, y: 0, width: 1, height: 1, patch_idx: 0 },
) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
};
const tile = { image_data: 'AA==', slide_name: 's', x: 0, y: 0, width: 1, height: 1, patch_idx: 0 };

t.test('503 loading: waits Retry-After, then succeeds', async (t) => {
  const url = await peer(t, (_req, res, n) =>
    n === 0 ? res.writeHead(503, { 'retry-after': '1' }).end('{"status":"loading"}') : ok(res),
  );
  const client = new TileClient({ servers: [url], concurrency: 1 });
  t.teardown(() => client.close());
  const start = Date.now();
  const res = await client.infer('/api/predict/m', tile);
  t.same(res.output, [1]);
  t.equal(client.retries, 1);
  t.ok(Date.now() - start >= 950, `waited ${Date.now() - start} ms`);
});

t.test('429 from a proxy in front: waits Retry-After as for a 503', async (t) => {
  const url = await peer(t, (_req, res, n) =>
    n === 0 ? res.writeHead(429, { 'retry-after': '1' }).end('Too Many Requests') : ok(res),
  );
  const client = new TileClient({ servers: [url], concurrency: 1 });
  t.teardown(() => client.close());
  const res = await client.infer('/api/predict/m', tile);
  t.same(res.output, [1]);
  t.equal(client.retries, 1);
});

t.test('500 and a dropped connection are retried with backoff', async (t) => {
  const url = await peer(t, (req, res, n) =>
    n === 0 ? res.writeHead(500).end('{"detail":"Internal server error"}') : n === 1 ? req.socket.destroy() : ok(res),
  );
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
  const url = await peer(t, (_req, res) =>
    res.writeHead(422, { 'content-type': 'application/json' }).end(JSON.stringify(detail)),
  );
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
  const fields = {
    slide_name: 'Schnitt-ä "1"',
    x: 448,
    y: 0,
    width: 224,
    height: 224,
    patch_idx: 3,
    tissue_ratio: null,
    resolution: 0.5,
  };
  t.equal(
    tileRequestBody(png, fields).toString('utf8'),
    JSON.stringify({ image_data: png.toString('base64'), ...fields }),
  );
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
  const client = new TileClient({
    servers: [`http://127.0.0.1:${(server.address() as AddressInfo).port}`],
    concurrency: 1,
  });
  t.teardown(() => client.close());
  await client.infer('/api/predict/m', { type: 'application/json', bytes: tileRequestBody(png, fields), fields });
  t.same(JSON.parse(received), { image_data: png.toString('base64'), ...fields });
});

/** A peer that lists its models' bodies (or answers /api/models as `models` says) and records
 *  the tiles posted to it. */
async function tilePeer(t: Test, models: (res: ServerResponse) => void) {
  const posted: { url: string; type: string; body: Buffer }[] = [];
  const asked = { models: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/api/models') return (asked.models++, models(res));
      posted.push({ url: req.url!, type: String(req.headers['content-type']), body: Buffer.concat(chunks) });
      ok(res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posted, asked };
}

const listing = (types?: string[]) => (res: ServerResponse) =>
  res
    .writeHead(200, { 'content-type': 'application/json' })
    .end(JSON.stringify({ models: [{ name: 'm', ...(types && { content_types: types }) }] }));

t.test(
  'inferTile: raw pixels where the server takes them, else the PNG file, else the JSON of older servers',
  async (t) => {
    const rgb = Uint8Array.from({ length: 2 * 3 * 3 }, (_, i) => i * 13);
    const fields = {
      slide_name: 's 1',
      x: 4,
      y: 6,
      width: 2,
      height: 3,
      patch_idx: 9,
      bulk_rna: [1, 2.5],
      tissue_ratio: null,
      resolution: 0.5,
    };
    const png = encodeRgbPng(rgb, 2, 3);
    const query = 'mode=prediction&slide_name=s+1&x=4&y=6&width=2&height=3&patch_idx=9&bulk_rna=1%2C2.5&resolution=0.5';
    const send = async (
      models: (res: ServerResponse) => void,
      tile: TileInput,
      options: Partial<ClientOptions> = {},
    ) => {
      const peer = await tilePeer(t, models);
      const client = new TileClient({ servers: [peer.url], concurrency: 2, ...options });
      t.teardown(() => client.close());
      await client.inferTile('/api/predict/m?mode=prediction', tile);
      await client.inferTile('/api/predict/m?mode=prediction', tile);
      t.equal(peer.asked.models, options.bodies === 'json' ? 0 : 1, '/api/models is read once (never for JSON only)');
      return peer.posted;
    };
    const raw = await send(listing(['application/json', 'image/png', 'application/octet-stream']), { fields, rgb });
    t.same(
      raw[0],
      { url: `/api/predict/m?${query}`, type: 'application/octet-stream', body: Buffer.from(rgb) },
      'raw RGB, the fields in the query',
    );
    const pngBody = await send(listing(['application/json', 'image/png']), { fields, rgb });
    t.same(
      pngBody[0],
      { url: `/api/predict/m?${query}`, type: 'image/png', body: png },
      'the PNG file to a server without raw bodies',
    );
    const asJson = JSON.parse(tileRequestBody(png, fields).toString());
    for (const [name, models] of [
      ['no /api/models', (res: ServerResponse) => res.writeHead(404).end('{"detail":"Not Found"}')],
      ['no content_types', listing()],
    ] as const) {
      const posted = await send(models, { fields, rgb });
      t.same(
        [posted[0].url, posted[0].type, JSON.parse(posted[0].body.toString())],
        ['/api/predict/m?mode=prediction', 'application/json', asJson],
        `${name}: the contract's JSON`,
      );
    }
    const forced = await send(
      listing(['application/json', 'image/png', 'application/octet-stream']),
      { fields, png },
      { bodies: 'json' },
    );
    t.equal(forced[0].type, 'application/json', "bodies: 'json' sends JSON whatever the server takes");
    const pngOnly = await send(listing(['application/json', 'image/png', 'application/octet-stream']), { fields, png });
    t.same([pngOnly[0].type, pngOnly[0].body], ['image/png', png], 'PNG bytes go as the PNG file');
    await t.rejects(
      new TileClient({ servers: ['http://127.0.0.1:1'], concurrency: 1 }).inferTile('/api/predict/m', {
        fields,
        rgb: rgb.subarray(1),
      }),
      /not 17/,
    );
  },
);

t.test('inferTile: fields too long for a query (a long bulk_rna) go in the JSON body', async (t) => {
  const rgb = new Uint8Array(2 * 2 * 3);
  // 3,000 genes of counts: over 16 KiB of query, which Node's HTTP server refuses (431).
  const bulk_rna = Array.from({ length: 3000 }, (_, i) => 1000 + i / 7);
  const fields = { slide_name: 's', x: 0, y: 0, width: 2, height: 2, patch_idx: 0, bulk_rna };
  const peer = await tilePeer(t, listing(['application/json', 'image/png', 'application/octet-stream']));
  const client = new TileClient({ servers: [peer.url], concurrency: 1 });
  t.teardown(() => client.close());
  await client.inferTile('/api/predict/m', { fields, rgb });
  await client.inferTile('/api/predict/m', { fields: { ...fields, bulk_rna: [1, 2] }, rgb });
  t.same(
    peer.posted.map((p) => p.type),
    ['application/json', 'application/octet-stream'],
    'the long fields as JSON; short ones still in the query',
  );
  t.same(JSON.parse(peer.posted[0].body.toString()).bulk_rna, bulk_rna);
});

t.test(
  'inferTile: a 5xx from GET /api/models is asked again, not taken for a server without binary bodies',
  async (t) => {
    let asked = 0;
    const types = ['application/json', 'image/png', 'application/octet-stream'];
    const peer = await tilePeer(t, (res) =>
      asked++ === 0
        ? res.writeHead(503, { 'retry-after': '1' }).end('{"detail":"Service under pressure"}')
        : listing(types)(res),
    );
    const client = new TileClient({ servers: [peer.url], concurrency: 1 });
    t.teardown(() => client.close());
    const fields = { slide_name: 's', x: 0, y: 0, width: 2, height: 2, patch_idx: 0 };
    await client.inferTile('/api/predict/m', { fields, rgb: new Uint8Array(12) });
    await client.inferTile('/api/predict/m', { fields, rgb: new Uint8Array(12) });
    t.same(
      peer.posted.map((p) => p.type),
      ['application/json', 'application/octet-stream'],
      'JSON while the list is unknown, raw pixels once it is read',
    );
    t.equal(asked, 2);
  },
);

t.test('bodyTypes: the bodies every server takes for the model (what tile-infer makes ahead)', async (t) => {
  const all = ['application/json', 'image/png', 'application/octet-stream'];
  const types = async (servers: string[], path = '/api/predict/m?mode=prediction') => {
    const client = new TileClient({ servers, concurrency: 1 });
    t.teardown(() => client.close());
    return [...(await client.bodyTypes(path))];
  };
  const [a, b, older, pngOnly] = await Promise.all([
    tilePeer(t, listing(all)),
    tilePeer(t, listing(all)),
    tilePeer(t, listing()),
    tilePeer(t, listing(['application/json', 'image/png'])),
  ]);
  t.same(await types([a.url, b.url]), all, 'two current servers: raw pixels');
  t.same(await types([a.url, pngOnly.url]), ['application/json', 'image/png'], 'what both take');
  t.same(await types([a.url, older.url]), ['application/json'], 'a server without content_types: JSON for all');
  t.same(await types([a.url, await closedPort()]), ['application/json'], 'a server that cannot be asked: JSON for all');
  t.same(await types([a.url], '/api/predict/other'), ['application/json'], 'a model the server does not list');
});

t.test(
  'inferTile against the service app: raw pixels reach the model as pixels; an older server gets JSON',
  async (t) => {
    const { app, backend } = await fakeService();
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const png = cellularPng(5);
    const rgb = Buffer.from((await decodePng(png)).data);
    const { image_data: _, ...fields } = tileRequest(png, { resolution: 0.5 });
    const client = new TileClient({ servers: [url], concurrency: 1 });
    t.teardown(() => client.close());
    const res = await client.inferTile('/api/embed/tile-embed', { fields: fields as TileFields, rgb });
    t.match(res, { slide_name: 'slide-001', x: 1024, y: 2048, patch_idx: 7, resolution: 0.5 });
    t.same([backend.jobs[0].image.format, backend.jobs[0].image.bytes], ['rgb', rgb]);
    await client.inferTile('/api/embed/tile-embed', { fields: fields as TileFields, png });
    t.same([backend.jobs[1].image.format, backend.jobs[1].image.loc], ['png', ['body']]);
    // The same app as an older server: /api/models without content_types.
    const older = await tilePeer(t, listing());
    const oldClient = new TileClient({ servers: [older.url], concurrency: 1 });
    t.teardown(() => oldClient.close());
    await oldClient.inferTile('/api/embed/m', { fields: fields as TileFields, rgb });
    const body = JSON.parse(older.posted[0].body.toString());
    t.same(
      Buffer.from((await decodePng(Buffer.from(body.image_data, 'base64'))).data),
      rgb,
      'the JSON carries the same pixels as a PNG',
    );
  },
);
