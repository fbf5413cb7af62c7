// The Open Inference Protocol (v2) over REST against the real service, with a client written
// from the protocol's published specification (test/helpers/v2-client.ts): every endpoint, JSON
// and binary bodies, outputs equal to the contract routes' for the same tiles on every shipped
// model, a batch of 32 equal tile for tile to 32 single requests, and malformed requests each a
// clear 400 with the service unharmed.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { V2_MODELS } from '../helpers/v2-packages.js';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';
import { image, pixels, pngs, same } from '../helpers/v2-tensors.js';
import { inferBody, readAnswer, V2Client, type Tensor } from '../helpers/v2-client.js';

type Json = Record<string, any>;

const server = await startServer({
  models: V2_MODELS(),
  config: { health: { strict_readiness: false } },
});
t.teardown(() => server.stop());
const client = new V2Client(server.url);

async function contract(path: string, body: Json): Promise<Json> {
  const response = await server.post(path, body);
  if (response.status !== 200) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as Json;
}

t.test('server: metadata with its extensions, live, ready', async (t) => {
  const meta = (await (await client.get('/v2')).json()) as Json;
  t.type(meta.name, 'string');
  t.type(meta.version, 'string');
  t.ok(meta.extensions.includes('binary_tensor_data'));
  t.equal((await client.get('/v2/health/live')).status, 200);
  t.equal((await client.get('/v2/health/ready')).status, 200, 'ready: a failed model aside without strict readiness');
});

t.test('model metadata from the manifest, -1 for the batch; versions; ready', async (t) => {
  const seg = (await (await client.get('/v2/models/tissue-seg')).json()) as Json;
  t.match(seg, { name: 'tissue-seg', versions: ['1.0.0'] });
  t.same(
    seg.inputs.find((i: Json) => i.name === 'image'),
    { name: 'image', datatype: 'UINT8', shape: [-1, 512, 512, 3] },
  );
  t.same(seg.outputs, [
    { name: 'mask', datatype: 'UINT8', shape: [-1, 512, 512] },
    { name: 'tissue_ratio', datatype: 'FP32', shape: [-1] },
  ]);
  const gene = (await (await client.get('/v2/models/gene-expr/versions/1.1.0')).json()) as Json;
  t.same(
    gene.inputs.find((i: Json) => i.name === 'bulk_rna'),
    { name: 'bulk_rna', datatype: 'FP32', shape: [-1, 50] },
  );
  t.same(gene.outputs, [
    { name: 'prediction', datatype: 'FP32', shape: [-1, 21] },
    { name: 'embedding', datatype: 'FP32', shape: [-1, 256] },
  ]);
  const embed = (await (await client.get('/v2/models/tile-embed')).json()) as Json;
  t.same(embed.outputs, [{ name: 'embedding', datatype: 'FP32', shape: [-1, 160] }]);
  t.equal((await client.get('/v2/models/tile-embed/ready')).status, 200);
  t.equal((await client.get('/v2/models/tile-embed/versions/1.0.0/ready')).status, 200);
  for (const path of [
    '/v2/models/nope',
    '/v2/models/nope/ready',
    '/v2/models/tile-embed/versions/9',
    '/v2/models/tile-embed/versions/9/ready',
  ]) {
    const response = await client.get(path);
    t.equal(response.status, 404, path);
    t.type(((await response.json()) as Json).error, 'string');
  }
  t.not((await client.get('/v2/models/broken/ready')).status, 200, 'a failed model is not ready');
});

t.test("tile-embed: JSON, binary and PNG bodies give the contract route's embedding", async (t) => {
  const files = [cellularPng(1), cellularPng(2)];
  const rgb = await Promise.all(files.map(pixels));
  const expected = await Promise.all(files.map((png) => contract('/api/embed/tile-embed', tileRequest(png))));
  for (const [what, answer] of [
    ['JSON', await client.infer('tile-embed', [image(rgb, 224)], { id: 'r1' })],
    [
      'binary',
      await client.infer('tile-embed', [image(rgb, 224)], {
        binaryInputs: true,
        binaryOutputs: true,
        outputs: ['embedding'],
      }),
    ],
    ['PNG files, binary', await client.infer('tile-embed', [pngs(files)], { binaryInputs: true })],
    ['PNG files, JSON (base64)', await client.infer('tile-embed', [pngs(files)], { version: '1.0.0' })],
  ] as const) {
    t.equal(answer.status, 200, what);
    const out = answer.outputs.get('embedding')!;
    t.same(out.shape, [2, 160], `${what}: shape`);
    for (let i = 0; i < 2; i++)
      t.ok(
        same(Array.from(out.values).slice(i * 160, (i + 1) * 160), Float32Array.from(expected[i].output)),
        `${what}: tile ${i} as the contract's`,
      );
  }
  const first = await client.infer('tile-embed', [image(rgb, 224)], { id: 'r1' });
  t.match(first.json, { model_name: 'tile-embed', model_version: '1.0.0', id: 'r1', parameters: { trained: false } });
});

t.test("gene-expr: prediction and embedding of one pass, with bulk RNA, as the contract's", async (t) => {
  const files = [cellularPng(3), cellularPng(4)];
  const rgb = await Promise.all(files.map(pixels));
  const bulk = [Array.from({ length: 50 }, (_, i) => i), Array.from({ length: 50 }, (_, i) => 50 - i)];
  const expected = await Promise.all(
    files.map((png, i) =>
      contract(
        '/api/predict/gene-expr?mode=prediction_with_embedding',
        tileRequest(png, { bulk_rna: bulk[i], resolution: 0.5 }),
      ),
    ),
  );
  const inputs: Tensor[] = [
    image(rgb, 224),
    { name: 'bulk_rna', datatype: 'FP32', shape: [2, 50], data: bulk.flat() },
    { name: 'resolution', datatype: 'FP32', shape: [2], data: [0.5, 0.5] },
  ];
  for (const binary of [false, true]) {
    const answer = await client.infer('gene-expr', inputs, { binaryInputs: binary, binaryOutputs: binary });
    t.equal(answer.status, 200);
    const prediction = answer.outputs.get('prediction')!;
    const embedding = answer.outputs.get('embedding')!;
    t.same(
      [prediction.shape, embedding.shape],
      [
        [2, 21],
        [2, 256],
      ],
    );
    for (let i = 0; i < 2; i++) {
      t.ok(
        same(Array.from(prediction.values).slice(i * 21, (i + 1) * 21), Float32Array.from(expected[i].output)),
        `binary ${binary}: prediction ${i}`,
      );
      t.ok(
        same(Array.from(embedding.values).slice(i * 256, (i + 1) * 256), Float32Array.from(expected[i].embedding)),
        `binary ${binary}: embedding ${i}`,
      );
    }
  }
  const only = await client.infer('gene-expr', [image(rgb, 224)], {
    outputs: ['embedding'],
    parameters: { resolution: 0.5 },
  });
  t.same([...only.outputs.keys()], ['embedding'], 'outputs picks');
  const embedOnly = await Promise.all(files.map((png) => contract('/api/embed/gene-expr', tileRequest(png))));
  t.ok(
    same(Array.from(only.outputs.get('embedding')!.values).slice(0, 256), Float32Array.from(embedOnly[0].output)),
    'as /api/embed',
  );
});

t.test("tissue-seg: mask and tissue_ratio as the contract's", async (t) => {
  const files = [fixturePng('he-mixed'), fixturePng('ihc-pale')];
  const rgb = await Promise.all(files.map(pixels));
  const expected = await Promise.all(
    files.map((png) => contract('/api/predict/tissue-seg', tileRequest(png, { resolution: 8 }))),
  );
  for (const answer of [
    await client.infer('tissue-seg', [image(rgb, 512)], {
      binaryInputs: true,
      binaryOutputs: true,
      parameters: { resolution: 8 },
    }),
    await client.infer('tissue-seg', [pngs(files)], {}),
  ]) {
    t.equal(answer.status, 200);
    const mask = answer.outputs.get('mask')!;
    t.same(mask.shape, [2, 512, 512]);
    const ratio = answer.outputs.get('tissue_ratio')!;
    for (let i = 0; i < 2; i++) {
      t.ok(same(Array.from(mask.values).slice(i * 512 * 512, (i + 1) * 512 * 512), expected[i].output), `mask ${i}`);
      t.equal(ratio.values[i], Math.fround(expected[i].tissue_ratio), `tissue_ratio ${i}`);
    }
  }
});

t.test('every infer answer names the package that gave it (x-model-sha256), as /api/metadata does', async (t) => {
  const seen = new Set<string>();
  for (const [model, size, parameters] of [
    ['tile-embed', 224, {}],
    ['gene-expr', 224, { resolution: 0.5 }],
    ['tissue-seg', 512, { resolution: 8 }],
  ] as const) {
    const { sha256 } = (await (await server.get(`/api/metadata/${model}`)).json()) as Json;
    t.match(sha256, /^[0-9a-f]{64}$/, model);
    seen.add(sha256);
    const files = [cellularPng(5, size), cellularPng(6, size)];
    for (const binary of [false, true]) {
      const answer = await client.infer(model, [pngs(files)], {
        binaryInputs: binary,
        binaryOutputs: binary,
        parameters,
      });
      t.equal(answer.status, 200, model);
      t.equal(answer.headers.get('x-model-sha256'), sha256, `${model}, ${binary ? 'binary' : 'JSON'} body`);
    }
  }
  t.equal(seen.size, 3, "each model's own");
  const refused = await client.infer('tile-embed', [pngs([Buffer.from('not a PNG')])]);
  t.equal(refused.status, 400);
  t.equal(refused.headers.get('x-model-sha256'), null, 'no model answered a refused request');
});

t.test('a batch of 32 equals 32 single requests and the contract route, tile for tile', async (t) => {
  const files = Array.from({ length: 32 }, (_, i) => cellularPng(100 + i));
  const rgb = await Promise.all(files.map(pixels));
  const batch = await client.infer('tile-embed-b32', [image(rgb, 224)], { binaryInputs: true, binaryOutputs: true });
  t.equal(batch.status, 200);
  const values = Array.from(batch.outputs.get('embedding')!.values);
  const singles = await Promise.all(
    rgb.map((one) => client.infer('tile-embed-b32', [image([one], 224)], { binaryInputs: true, binaryOutputs: true })),
  );
  const routes = await Promise.all(files.map((png) => contract('/api/embed/tile-embed-b32', tileRequest(png))));
  for (let i = 0; i < 32; i++) {
    const row = values.slice(i * 160, (i + 1) * 160);
    t.ok(same(row, singles[i].outputs.get('embedding')!.values), `tile ${i}: as alone`);
    t.ok(same(row, Float32Array.from(routes[i].output)), `tile ${i}: as the contract route`);
  }
  const over = await client.infer('tile-embed-b32', [image([...rgb, rgb[0]], 224)], { binaryInputs: true });
  t.equal(over.status, 400);
  t.match(over.json.error, /33 tiles, expected 1 to 32/);
  const overPackage = await client.infer('tile-embed', [image(rgb.slice(0, 17), 224)], { binaryInputs: true });
  t.match(overPackage, { status: 400, json: { error: /batch\.max/ } });
});

t.test('malformed requests: a clear 400 each, and the service unharmed', async (t) => {
  const rgb = await pixels(cellularPng(9));
  const post = async (body: Buffer, headers: Record<string, string> = {}) =>
    readAnswer(await client.post('/v2/models/tile-embed/infer', body, headers));
  const binary = (declared: number, shape = [1, 224, 224, 3], datatype = 'UINT8', data = rgb) => {
    const header = Buffer.from(
      JSON.stringify({ inputs: [{ name: 'image', datatype, shape, parameters: { binary_data_size: declared } }] }),
    );
    return {
      body: Buffer.concat([header, data]),
      headers: { 'inference-header-content-length': String(header.length) },
    };
  };
  const cases: [string, Promise<Awaited<ReturnType<typeof post>>>, RegExp][] = [
    [
      'Inference-Header-Content-Length past the body',
      post(binary(rgb.length).body, { 'inference-header-content-length': String(rgb.length + 10_000) }),
      /Inference-Header-Content-Length is \d+, past the end/,
    ],
    [
      'Inference-Header-Content-Length not a number',
      post(binary(rgb.length).body, { 'inference-header-content-length': 'ten' }),
      /Inference-Header-Content-Length/,
    ],
    [
      'binary_data_size short of the data',
      (async () => {
        const b = binary(rgb.length - 3);
        return post(b.body, b.headers);
      })(),
      /add up to \d+ bytes, but \d+ bytes follow/,
    ],
    [
      'binary_data_size past the data',
      (async () => {
        const b = binary(rgb.length + 3);
        return post(b.body, b.headers);
      })(),
      /input 'image': binary_data_size \d+ at byte 0 .* runs past/,
    ],
    [
      'shape does not match the data',
      (async () => {
        const b = binary(rgb.length, [2, 224, 224, 3]);
        return post(b.body, b.headers);
      })(),
      /input 'image': shape \[2, 224, 224, 3\] holds 301056 UINT8 elements/,
    ],
    [
      'wrong datatype',
      (async () => {
        const b = binary(rgb.length, [1, 224, 224, 3], 'FP32');
        return post(b.body, b.headers);
      })(),
      /input 'image' has datatype FP32, expected UINT8/,
    ],
    [
      'JSON data of the wrong count',
      post(inferBody([{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3], data: [1, 2, 3] }]).header),
      /input 'image': shape .* holds 150528 elements, data has 3/,
    ],
    [
      'a tile of the wrong size',
      post(inferBody([{ name: 'image', datatype: 'UINT8', shape: [1, 8, 8, 3], data: new Uint8Array(192) }]).header),
      /input 'image', tile 0: tile-embed takes 224x224 tiles/,
    ],
    [
      'a BYTES length prefix past the data',
      (async () => {
        const b = binary(8, [1], 'BYTES', Buffer.from([200, 0, 0, 0, 1, 2, 3, 4]));
        return post(b.body, b.headers);
      })(),
      /BYTES element 0 declares 200 bytes/,
    ],
    [
      'not a PNG',
      post(inferBody([{ name: 'image', datatype: 'BYTES', shape: [1], data: [Buffer.from('not a png')] }]).header),
      /input 'image', tile 0: .*PNG/,
    ],
    [
      'a PNG the worker cannot decode',
      post(
        inferBody([
          {
            name: 'image',
            datatype: 'BYTES',
            shape: [1],
            data: [Buffer.concat([cellularPng(9).subarray(0, 60), Buffer.alloc(100)])],
          },
        ]).header,
      ),
      /input 'image', tile 0/,
    ],
    [
      'resolution out of tolerance',
      post(inferBody([image([rgb], 224)], { parameters: { resolution: 2 } }).header),
      /input 'resolution', tile 0: tile-embed takes tiles at 0.5 MPP/,
    ],
    [
      'an input the model does not take',
      post(
        inferBody([
          image([rgb], 224),
          { name: 'bulk_rna', datatype: 'FP32', shape: [1, 50], data: new Array(50).fill(1) },
        ]).header,
      ),
      /input 'bulk_rna': tile-embed takes no such input/,
    ],
    [
      'an output the model does not have',
      post(inferBody([image([rgb], 224)], { outputs: ['mask'] }).header),
      /output 'mask': tile-embed has no such output/,
    ],
    [
      "JSON that is not the protocol's",
      post(Buffer.from('{"inputs": [{"name": "image"}]}')),
      /does not fit the protocol/,
    ],
    ['malformed JSON', post(Buffer.from('{"inputs": [')), /malformed/],
  ];
  for (const [what, answer, message] of cases) {
    const a = await answer;
    t.equal(a.status, 400, what);
    t.match(a.json.error, message, `${what}: ${a.json.error}`);
    t.equal(a.headers.get('x-error-code'), 'TILE_ERR_V2_INVALID', what);
  }
  const missing = await client.infer('nope', [image([rgb], 224)]);
  t.match(missing, { status: 404, json: { error: /model 'nope' is not served/ } });
  const failed = await client.infer('broken', [image([rgb], 224)]);
  t.equal(failed.status, 503, 'a model that failed to load');
  t.ok(failed.headers.get('retry-after'));
  t.type(failed.json.error, 'string');
  // Unharmed: ready, serving, no worker restarted.
  t.equal((await client.get('/v2/health/ready')).status, 200);
  t.equal((await client.infer('tile-embed', [image([rgb], 224)], { binaryInputs: true })).status, 200);
  const { workers } = (await (await server.get('/diagnostics')).json()) as {
    workers: { id: string; restarts: number }[];
  };
  t.same(
    workers.filter((w) => w.restarts > 0 && !w.id.startsWith('broken')).map((w) => w.id),
    [],
    'no worker restarted (the broken package is retried by design)',
  );
});
