// End-to-end over HTTP against the real service with real workers: every endpoint and every
// error case of the contract.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { request } from 'node:http';
import { crc32 } from 'node:zlib';
import { startServer, MODELS, ROOT as ROOT_DIR, type TestServer } from '../helpers/server.js';
import { cellularPng, fixturePng, tileRequest, FIXTURES } from '../helpers/tiles.js';
import { shellDigest } from '../helpers/packages.js';
import { TileClient } from '../../src/client/tile-client.js';
import type { TileFields } from '../../src/contract/schemas.js';

type Json = Record<string, any>;

let server: TestServer;
t.before(async () => {
  server = await startServer({ config: { body_limit_bytes: 4 * 1024 * 1024 } });
});
t.teardown(() => server.stop());

const tile224 = cellularPng(11);
const bulk = Array.from({ length: 50 }, (_, i) => (i * 37) % 101);

async function json(res: Response): Promise<Json> {
  return (await res.json()) as Json;
}

t.test('health endpoints', async (t) => {
  t.same(await json(await server.get('/health/live')), { status: 'ok' });
  const ready = await server.get('/health/ready');
  t.equal(ready.status, 200);
  t.same((await json(ready)).models, { 'tissue-seg': 'ready', 'gene-expr': 'ready', 'tile-embed': 'ready' });
  const model = await server.get('/health/ready/gene-expr');
  t.equal(model.status, 200);
  t.same(await json(model), { model: 'gene-expr', status: 'ready', reason: null });
  const unknown = await server.get('/health/ready/no-such-model');
  t.equal(unknown.status, 404);
  t.same(await json(unknown), {
    detail: 'Not Found; enabled models: tissue-seg, gene-expr, tile-embed (GET /api/models)',
  });
});

t.test('tissue-seg returns a 0/1 mask of height x width and echoes the tile', async (t) => {
  const res = await server.post('/api/predict/tissue-seg', tileRequest(fixturePng('he-mixed'), { resolution: 8.0 }));
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /application\/json/);
  const body = await json(res);
  t.equal(body.output.length, 512 * 512);
  t.ok(body.output.every((v: number) => v === 0 || v === 1));
  t.match(body, {
    slide_name: 'slide-001',
    x: 1024,
    y: 2048,
    width: 512,
    height: 512,
    patch_idx: 7,
    resolution: 8.0,
    embedding: null,
  });
  const fraction = body.output.reduce((s: number, v: number) => s + v, 0) / body.output.length;
  t.equal(body.tissue_ratio, fraction, 'tissue_ratio defaults to the mask fraction');

  const truth = PNG.sync.read(readFileSync(join(FIXTURES, 'tissue', 'he-mixed.truth.png'))).data;
  let inter = 0;
  let union = 0;
  body.output.forEach((v: number, i: number) => {
    const g = truth[i * 4] > 127 ? 1 : 0;
    inter += v & g;
    union += v | g;
  });
  t.ok(inter / union >= 0.85, `IoU over HTTP ${(inter / union).toFixed(3)} >= 0.85`);

  const given = await json(
    await server.post('/api/predict/tissue-seg', tileRequest(fixturePng('he-mixed'), { tissue_ratio: 0.25 })),
  );
  t.equal(given.tissue_ratio, 0.25, 'a given tissue_ratio is echoed');
  t.equal(given.resolution, null);
});

t.test('gene-expr prediction depends on pixels and bulk, deterministically', async (t) => {
  const predict = async (png: Buffer, fields: Json = {}) =>
    json(await server.post('/api/predict/gene-expr', tileRequest(png, fields)));
  const a = await predict(tile224);
  t.equal(a.output.length, 21);
  t.equal(a.embedding, null);
  t.same((await predict(tile224)).output, a.output, 'same tile, same output');
  t.not(
    JSON.stringify((await predict(cellularPng(12))).output),
    JSON.stringify(a.output),
    'different tiles, different outputs',
  );
  const withBulk = await predict(tile224, { bulk_rna: bulk });
  t.not(JSON.stringify(withBulk.output), JSON.stringify(a.output), 'bulk changes the prediction');
  t.same(
    (await predict(tile224, { bulk_rna: new Array(50).fill(0) })).output,
    a.output,
    'omitted bulk is the zero vector',
  );
  t.same((await predict(tile224, { bulk_rna: null })).output, a.output, 'null bulk is the zero vector');
});

t.test('prediction_with_embedding matches /api/predict and /api/embed', async (t) => {
  const both = await json(
    await server.post(
      '/api/predict/gene-expr?mode=prediction_with_embedding',
      tileRequest(tile224, { bulk_rna: bulk }),
    ),
  );
  const prediction = await json(
    await server.post('/api/predict/gene-expr?mode=prediction', tileRequest(tile224, { bulk_rna: bulk })),
  );
  const embedding = await json(await server.post('/api/embed/gene-expr', tileRequest(tile224, { bulk_rna: bulk })));
  t.equal(both.embedding.length, 256);
  t.same(both.output, prediction.output);
  t.same(both.embedding, embedding.output);
  t.equal(embedding.embedding, null);
});

t.test('tile-embed serves its own embedding', async (t) => {
  const res = await json(await server.post('/api/embed/tile-embed', tileRequest(tile224, { resolution: 0.5 })));
  t.equal(res.output.length, 160);
  const norm = Math.hypot(...res.output);
  t.ok(Math.abs(norm - 1) < 1e-4, 'unit length');
  const other = await json(await server.post('/api/embed/tile-embed', tileRequest(cellularPng(99))));
  t.not(JSON.stringify(other.output), JSON.stringify(res.output));
  t.equal(
    (await server.post('/api/predict/tile-embed', tileRequest(tile224))).status,
    404,
    'no predict route for an embedding-only package',
  );
});

/** The tile's pixels as uint8 RGB, by another decoder than the service's (pngjs, RGBA). */
function rgbOf(png: Buffer): Buffer {
  const { data, width, height } = PNG.sync.read(png);
  const rgb = Buffer.alloc(width * height * 3);
  for (let i = 0; i < width * height; i++) data.copy(rgb, i * 3, i * 4, i * 4 + 3);
  return rgb;
}

t.test('the same tile as JSON, as a PNG body and as raw RGB: identical answers from every model', async (t) => {
  const cases = [
    { path: '/api/predict/tissue-seg', png: fixturePng('he-mixed'), fields: { resolution: 8.0 } },
    {
      path: '/api/predict/gene-expr?mode=prediction_with_embedding',
      png: tile224,
      fields: { bulk_rna: bulk, tissue_ratio: 0.5 },
    },
    { path: '/api/embed/tile-embed', png: tile224, fields: { resolution: 0.5 } },
  ];
  for (const { path, png, fields } of cases) {
    const { image_data: _, ...rest } = tileRequest(png, fields);
    const query = Object.entries(rest)
      .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(',') : v}`)
      .join('&');
    const url = `${server.url}${path}${path.includes('?') ? '&' : '?'}${query}`;
    // One at a time: a tile's answer is compared with itself, not across batch sizes.
    const asJson = await json(await server.post(path, tileRequest(png, fields)));
    const asPng = await (
      await fetch(url, { method: 'POST', headers: { 'content-type': 'image/png' }, body: png })
    ).json();
    const asRgb = await (
      await fetch(url, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: rgbOf(png) })
    ).json();
    t.ok(asJson.output.length > 0, `${path}: ${asJson.output.length} values`);
    t.same(asPng, asJson, `${path}: the PNG body's answer is the JSON body's`);
    t.same(asRgb, asJson, `${path}: the raw RGB body's answer is the JSON body's`);
    if (path.includes('tissue-seg')) {
      const tensor = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream', accept: 'application/octet-stream' },
        body: rgbOf(png),
      });
      t.same(
        [...new Uint8Array(await tensor.arrayBuffer())],
        asJson.output,
        `${path}: the tensor answer is the JSON answer's mask`,
      );
    }
  }
  // The client library sends raw pixels to this server, JSON when told to: the same answer.
  const client = new TileClient({ servers: [server.url], concurrency: 1 });
  const jsonClient = new TileClient({ servers: [server.url], concurrency: 1, bodies: 'json' });
  const { image_data: _, ...fields } = tileRequest(tile224, { bulk_rna: bulk });
  const viaRaw = await client.inferTile('/api/predict/gene-expr?mode=prediction_with_embedding', {
    fields: fields as TileFields,
    rgb: rgbOf(tile224),
  });
  const viaJson = await jsonClient.inferTile('/api/predict/gene-expr?mode=prediction_with_embedding', {
    fields: fields as TileFields,
    rgb: rgbOf(tile224),
  });
  await Promise.all([client.close(), jsonClient.close()]);
  t.same(viaRaw, viaJson, 'tile-client: raw pixels and JSON give the same answer');
  const short = await fetch(
    `${server.url}/api/embed/tile-embed?slide_name=s&x=0&y=0&width=224&height=224&patch_idx=0`,
    { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: Buffer.alloc(100) },
  );
  t.equal(short.status, 422);
  t.match(await short.json(), { detail: [{ loc: ['body'], msg: /150528 bytes/ }] });
  const broken = Buffer.from(tile224);
  broken.fill(0x55, 60, 400);
  const corrupt = await fetch(
    `${server.url}/api/embed/tile-embed?slide_name=s&x=0&y=0&width=224&height=224&patch_idx=0`,
    { method: 'POST', headers: { 'content-type': 'image/png' }, body: broken },
  );
  t.match(
    await corrupt.json(),
    { detail: [{ loc: ['body'], msg: /the body is not a decodable PNG/ }] },
    'the worker names the body',
  );
});

t.test('metadata', async (t) => {
  const gene = await json(await server.get('/api/metadata/gene-expr'));
  const sha = shellDigest(join(MODELS, 'gene-expr'));
  t.match(gene, {
    model: 'gene-expr',
    tasks: ['prediction', 'embedding'],
    tile: { width: 224, height: 224, mpp: 0.5 },
    embedding_dim: 256,
    trained: false,
    sha256: sha,
    licence: 'Apache-2.0',
  });
  t.equal(gene.input_genes.length, 50);
  t.equal(gene.output_genes.length, 21);
  t.ok(gene.input_genes.includes('ESR1') && gene.output_genes.includes('MKI67'));
  const seg = await json(await server.get('/api/metadata/tissue-seg'));
  t.match(seg, { tasks: ['segmentation'], tile: { width: 512, height: 512, mpp: 8 }, trained: false });
  t.notOk('input_genes' in seg);
  t.match(await json(await server.get('/api/metadata/tile-embed')), { embedding_dim: 160, trained: false });
});

t.test('422: schema errors in the pydantic shape, all at once', async (t) => {
  const res = await server.post('/api/predict/gene-expr', {
    ...tileRequest(tile224),
    x: 'left',
    y: 1.5,
    slide_name: undefined,
    bulk_rna: [1, 2, 'three'],
  });
  t.equal(res.status, 422);
  const { detail } = await json(res);
  t.same(
    detail.find((d: Json) => d.loc[1] === 'x'),
    { loc: ['body', 'x'], msg: 'Input should be a valid integer', type: 'int_type', input: 'left' },
  );
  t.match(
    detail.find((d: Json) => d.loc[1] === 'y'),
    { type: 'int_from_float', input: 1.5 },
  );
  t.match(
    detail.find((d: Json) => d.loc[1] === 'slide_name'),
    { loc: ['body', 'slide_name'], type: 'missing', msg: 'Field required' },
  );
  t.match(
    detail.find((d: Json) => d.loc[1] === 'bulk_rna'),
    { loc: ['body', 'bulk_rna', 2], type: 'float_type', input: 'three' },
  );
  t.equal(detail.length, 4);
});

t.test('422: malformed JSON is json_invalid', async (t) => {
  const res = await server.post('/api/predict/gene-expr', '{"x": 1,');
  t.equal(res.status, 422);
  t.match((await json(res)).detail[0], { type: 'json_invalid', msg: 'JSON decode error', loc: ['body'] });
});

t.test(
  'a body nested millions of levels deep, or holding millions of values, is refused before it is parsed, as fast as a flat one',
  async (t) => {
    // 3 MB each: one nested 1.5 million levels deep; three of about a million values (a bulk_rna
    // of strings, a schema error each: 5.8 s of a front before; top-level fields: 2.3x a flat
    // body; a top-level array of objects); one flat (a long string) of the same size.
    const levels = 1_500_000;
    const deep = `{"x": ${'['.repeat(levels)}${']'.repeat(levels)}}`;
    const size = deep.length;
    /** `head`, then `item` and a comma as often as fits in `size`, then `tail`, padded. */
    const repeated = (head: string, item: string, tail: string) => {
      const n = Math.floor((size - head.length - tail.length) / (item.length + 1));
      const body = `${head}${`${item},`.repeat(n - 1)}${item}${tail}`;
      return body + ' '.repeat(size - body.length);
    };
    const bodies = {
      deep,
      bulk: repeated('{"bulk_rna": [', '"a"', ']}'),
      fields: repeated('{', '"k":0', '}'),
      array: repeated('[', '{}', ']'),
      flat: `{"x": "${'A'.repeat(size - 9)}"}`,
    };
    for (const body of Object.values(bodies)) t.equal(body.length, size);
    const timed = async (body: string) => {
      const started = performance.now();
      const res = await server.post('/api/predict/gene-expr', body);
      return { ms: performance.now() - started, status: res.status, body: await json(res) };
    };
    const runs: Record<string, number[]> = Object.fromEntries(Object.keys(bodies).map((k) => [k, []]));
    for (let i = 0; i < 3; i++)
      for (const [kind, body] of Object.entries(bodies)) {
        const answer = await timed(body);
        t.equal(answer.status, 422, kind);
        runs[kind].push(answer.ms);
        if (i > 0) continue;
        if (kind === 'deep')
          t.match(answer.body.detail[0], {
            type: 'json_invalid',
            msg: 'JSON decode error',
            loc: ['body', 21],
            ctx: { error: /nested deeper than 16 levels at position 21/ },
          });
        else if (kind !== 'flat')
          t.match(answer.body.detail, [
            {
              type: 'value_error',
              loc: ['body'],
              msg: /holds more than 1074 values; a gene-expr tile request holds its fields and its 50 bulk_rna counts/,
            },
          ]);
      }
    const median = (v: number[]) => v.sort((a, b) => a - b)[1];
    for (const kind of ['deep', 'bulk', 'fields', 'array'])
      t.ok(
        median(runs[kind]) < 5 * median(runs.flat),
        `${kind}: answered in ${median(runs[kind]).toFixed(0)} ms, a flat body of the same size in ${median(runs.flat).toFixed(0)} ms`,
      );
    t.equal((await server.get('/health/live')).status, 200);
  },
);

t.test('422: query parameters', async (t) => {
  const bad = await json(await server.post('/api/predict/gene-expr?mode=both', tileRequest(tile224)));
  t.match(bad.detail[0], { loc: ['query', 'mode'], type: 'literal_error', input: 'both' });
  const seg = await server.post(
    '/api/predict/tissue-seg?mode=prediction_with_embedding',
    tileRequest(fixturePng('he-mixed')),
  );
  t.equal(seg.status, 422);
  t.match((await json(seg)).detail[0], { loc: ['query', 'mode'], msg: "Input should be 'prediction'" });
});

t.test('422: tile checks name the field and what was expected', async (t) => {
  const cases: [string, Json, string, RegExp][] = [
    ['not base64', { image_data: '!!not base64!!' }, 'base64_decode', /base64/],
    ['not a PNG', { image_data: Buffer.from('GIF89a, a picture of sorts').toString('base64') }, 'value_error', /PNG/],
    [
      'PNG dims differ from width/height',
      { image_data: cellularPng(3, 200).toString('base64') },
      'value_error',
      /PNG is 200x200 pixels, expected width x height = 224x224/,
    ],
  ];
  for (const [name, fields, type, msg] of cases) {
    const res = await server.post('/api/predict/gene-expr', tileRequest(tile224, fields));
    t.equal(res.status, 422, name);
    const d = (await json(res)).detail;
    t.match(d[0], { loc: ['body', 'image_data'], type, msg }, name);
  }
  const size = await json(await server.post('/api/predict/gene-expr', tileRequest(fixturePng('he-mixed'))));
  t.match(size.detail[0], {
    loc: ['body', 'width'],
    msg: /gene-expr takes 224x224 tiles, got width x height = 512x512/,
  });
  const seg = await json(await server.post('/api/predict/tissue-seg', tileRequest(tile224)));
  t.match(seg.detail[0], { loc: ['body', 'width'], msg: /tissue-seg takes 512x512 tiles/ });
  const res = await json(await server.post('/api/predict/gene-expr', tileRequest(tile224, { resolution: 0.25 })));
  t.match(res.detail[0], { loc: ['body', 'resolution'], msg: /0.5 MPP \(0.450 to 0.550\), got 0.25/ });
  t.equal(
    (await server.post('/api/predict/gene-expr', tileRequest(tile224, { resolution: 0.54 }))).status,
    200,
    'within 10%',
  );
  const short = await json(await server.post('/api/predict/gene-expr', tileRequest(tile224, { bulk_rna: [1, 2, 3] })));
  t.match(short.detail[0], { loc: ['body', 'bulk_rna'], msg: /50 values, one per input gene of gene-expr .* got 3/ });
  const negative = await json(
    await server.post('/api/predict/gene-expr', tileRequest(tile224, { bulk_rna: [...bulk.slice(1), -4] })),
  );
  t.match(negative.detail[0], { loc: ['body', 'bulk_rna', 49], msg: /counts should be >= 0/ });
  const overflow = JSON.stringify(tileRequest(tile224, { bulk_rna: [...bulk.slice(1), 'INF'] })).replace(
    '"INF"',
    '1e400',
  );
  const huge = await json(await server.post('/api/predict/gene-expr', overflow));
  t.match(
    huge.detail[0],
    { loc: ['body', 'bulk_rna', 49], type: 'finite_number', msg: /out of range/ },
    'a count that overflows to infinity',
  );
  t.equal(
    (await server.post('/api/embed/gene-expr', tileRequest(tile224, { bulk_rna: [1] }))).status,
    200,
    'embed ignores bulk_rna',
  );
  const several = await json(
    await server.post('/api/predict/gene-expr', tileRequest(tile224, { resolution: 8, bulk_rna: [1] })),
  );
  t.equal(several.detail.length, 2, 'tile checks report every failure at once');
});

t.test('a PNG declaring huge dimensions is refused before it is inflated', async (t) => {
  const png = Buffer.from(tile224);
  png.writeUInt32BE(100000, 16);
  png.writeUInt32BE(100000, 20);
  png.writeUInt32BE(crc32(png.subarray(12, 29)), 29);
  const res = await server.post('/api/predict/gene-expr', tileRequest(png, { width: 224, height: 224 }));
  t.equal(res.status, 422);
  t.match((await json(res)).detail[0], {
    loc: ['body', 'image_data'],
    msg: /declares 100000x100000 pixels, more than the limit/,
  });
});

t.test('a PNG with corrupt image data is a 422 from the worker', async (t) => {
  const png = Buffer.from(tile224);
  png.fill(0x55, 60, 400);
  const res = await server.post('/api/predict/gene-expr', tileRequest(png));
  t.equal(res.status, 422);
  t.match((await json(res)).detail[0], { loc: ['body', 'image_data'], msg: /not a decodable PNG/ });
  t.equal((await server.post('/api/predict/gene-expr', tileRequest(tile224))).status, 200, 'the worker keeps serving');
});

t.test('bodies over the limit answer 413', async (t) => {
  // The server answers from the Content-Length alone and closes the connection, so the client
  // sends the headers and a first chunk, reads the answer, and stops uploading.
  const size = 5 * 1024 * 1024;
  const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request(
      server.url + '/api/predict/gene-expr',
      { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': size } },
      (res) => {
        let text = '';
        res
          .on('data', (d) => (text += d))
          .on('end', () => {
            resolve({ status: res.statusCode!, text });
            req.destroy();
          });
      },
    );
    req.on('error', (err) =>
      ['EPIPE', 'ECONNRESET'].includes((err as NodeJS.ErrnoException).code!) ? undefined : reject(err),
    );
    req.write('{"image_data": "' + 'A'.repeat(1024));
  });
  t.equal(status, 413);
  t.type(JSON.parse(text).detail, 'string');
});

t.test('unknown paths are 404; under /api the answer names the enabled models', async (t) => {
  t.equal((await server.post('/api/predict/nope', tileRequest(tile224))).status, 404);
  t.same(await json(await server.get('/api/metadata/nope')), {
    detail: 'Not Found; enabled models: tissue-seg, gene-expr, tile-embed (GET /api/models)',
  });
  t.same(await json(await server.get('/nope')), { detail: 'Not Found' });
});

t.test('OpenAPI document and Swagger UI', async (t) => {
  const doc = await json(await server.get('/openapi.json'));
  t.match(doc.openapi, /^3\./);
  t.equal(doc.info.version, '1.0.0');
  for (const path of [
    '/api/predict/tissue-seg',
    '/api/predict/gene-expr',
    '/api/embed/gene-expr',
    '/api/embed/tile-embed',
    '/api/metadata/gene-expr',
    '/health/ready',
    '/health/ready/{model}',
  ]) {
    t.ok(doc.paths[path], `${path} documented`);
  }
  const predict = doc.paths['/api/predict/gene-expr'].post;
  t.ok(predict.requestBody.content['application/json'].schema.properties.image_data);
  t.ok(predict.responses['422']);
  t.ok(predict.parameters.some((p: Json) => p.name === 'mode' && p.in === 'query'));
  const ui = await server.get('/docs/');
  t.equal(ui.status, 200);
  const html = await ui.text();
  t.notMatch(html, /https?:\/\/(cdn|unpkg)/, 'no CDN');
  const asset = /src="\.?\/?(static\/[^"]+\.js)"/.exec(html);
  t.ok(asset, 'references a local script');
  t.equal((await server.get(`/docs/${asset![1]}`)).status, 200, 'served from the npm package');
});

t.test('the README quick start: each example request is served by the real models', async (t) => {
  for (const [model, path] of [
    ['tissue-seg', '/api/predict/tissue-seg'],
    ['gene-expr', '/api/predict/gene-expr?mode=prediction_with_embedding'],
    ['tile-embed', '/api/embed/tile-embed'],
  ]) {
    const res = await server.post(path, readFileSync(join(ROOT_DIR, 'examples', `${model}.json`), 'utf8'));
    t.equal(res.status, 200, `examples/${model}.json`);
    const body = (await res.json()) as Json;
    t.ok(body.output.length > 0);
  }
});
