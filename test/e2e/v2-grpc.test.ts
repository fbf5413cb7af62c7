// The Open Inference Protocol over gRPC against the real service (grpc_port), with a client made
// by @grpc/grpc-js from the protocol's .proto alone: every call, raw and typed tensor contents,
// outputs equal to the contract routes' on every shipped model, a batch of 32 equal tile for tile
// to 32 singles, malformed requests each INVALID_ARGUMENT naming the input, NOT_FOUND and
// UNAVAILABLE, and the service unharmed.
import t from 'tap';
import { connect, type Settings } from 'node:http2';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ROOT, startServer } from '../helpers/server.js';
import { freePort } from '../helpers/tile-infer.js';
import { V2_MODELS } from '../helpers/v2-packages.js';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';
import { image, pixels, pngs, same } from '../helpers/v2-tensors.js';
import { tensorBytes, type Tensor } from '../helpers/v2-client.js';
import { framed, messagePrefix, modelInferStream } from '../helpers/grpc-wire.js';

type Json = Record<string, any>;

const grpcPort = await freePort();
const server = await startServer({
  models: V2_MODELS(),
  // A request arrives within 3 s or is let go, gRPC's as HTTP's.
  config: {
    health: { strict_readiness: false },
    grpc_port: grpcPort,
    body_limit_bytes: 12 << 20,
    front: { headers_timeout_ms: 3000, body_timeout_ms: 3000, max_inflight_bytes: 12 << 20 },
  },
});
t.teardown(() => server.stop());

// The client: the protocol's service from the .proto, snake_case fields as it names them.
const definition = protoLoader.loadSync(join(ROOT, 'proto/grpc_predict_v2.proto'), {
  keepCase: true,
  longs: Number,
  defaults: true,
  oneofs: true,
});
const { inference } = grpc.loadPackageDefinition(definition) as any;
const stub = new inference.GRPCInferenceService(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure(), {
  'grpc.max_receive_message_length': -1,
});
t.teardown(() => stub.close());
const call = (method: string, request: Json): Promise<Json> =>
  new Promise((resolve, reject) =>
    stub[method](request, (err: grpc.ServiceError | null, response: Json) => (err ? reject(err) : resolve(response))),
  );
const failure = (method: string, request: Json): Promise<grpc.ServiceError> =>
  call(method, request).then(
    (r) => {
      throw new Error(`expected an error, got ${JSON.stringify(r).slice(0, 200)}`);
    },
    (err) => err,
  );

/** ModelInfer with raw_input_contents; the outputs by name, decoded from raw_output_contents. */
async function infer(model: string, inputs: Tensor[], extra: Json = {}) {
  const response = await call('ModelInfer', {
    model_name: model,
    inputs: inputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
    raw_input_contents: inputs.map(tensorBytes),
    ...extra,
  });
  const outputs = new Map<string, { shape: number[]; values: ArrayLike<number> }>();
  response.outputs.forEach((o: Json, i: number) => {
    const bytes = new Uint8Array(response.raw_output_contents[i]).buffer;
    outputs.set(o.name, {
      shape: o.shape,
      values: o.datatype === 'UINT8' ? new Uint8Array(bytes) : new Float32Array(bytes),
    });
  });
  return { response, outputs };
}

async function contract(path: string, body: Json): Promise<Json> {
  const response = await server.post(path, body);
  if (response.status !== 200) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as Json;
}

t.test('the server opens HTTP/2 windows a batch fits in, not the 64 KiB default', async (t) => {
  // RFC 9113 6.5.2: SETTINGS_INITIAL_WINDOW_SIZE is what a peer may send on a stream before a
  // WINDOW_UPDATE; 6.9.2: the connection's window starts at 65,535 and grows by WINDOW_UPDATE.
  const session = connect(`http://127.0.0.1:${grpcPort}`);
  t.teardown(() => session.close());
  const settings = await new Promise<Settings>((resolve) => session.once('remoteSettings', resolve));
  t.ok(settings.initialWindowSize! >= 4 * 1024 * 1024, `stream window ${settings.initialWindowSize} bytes`);
  // The connection-level update follows the SETTINGS frame.
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.ok(session.state.remoteWindowSize! >= 4 * 1024 * 1024, `connection window ${session.state.remoteWindowSize} bytes`);
});

/** A ModelInfer stream that sends `sent` bytes of a message of `declared` and waits; it
 *  resolves with the RST_STREAM code the server closed it with, and when, or -1 after 15 s. */
async function stalled(declared: number, sent: number): Promise<{ code: number; seconds: number }> {
  const session = connect(`http://127.0.0.1:${grpcPort}`);
  try {
    const stream = modelInferStream(session);
    stream.write(Buffer.concat([messagePrefix(declared), Buffer.alloc(sent)]));
    const started = Date.now();
    const code = await new Promise<number>((resolve) => {
      stream.once('close', () => resolve(stream.rstCode!));
      setTimeout(() => resolve(-1), 15000).unref();
    });
    return { code, seconds: (Date.now() - started) / 1000 };
  } finally {
    session.close();
  }
}

t.test('bytes that are no ModelInferRequest: INVALID_ARGUMENT, not INTERNAL', async (t) => {
  const session = connect(`http://127.0.0.1:${grpcPort}`);
  t.teardown(() => session.close());
  const stream = modelInferStream(session);
  let status: Record<string, unknown> = {};
  stream.on('response', (headers) => (status = { ...status, ...headers }));
  stream.on('trailers', (trailers) => (status = { ...status, ...trailers }));
  stream.resume();
  // A message of five bytes, each 0xff: a field tag whose varint never ends.
  stream.end(Buffer.from([0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff]));
  await new Promise((resolve) => stream.once('close', resolve));
  t.equal(status['grpc-status'], String(grpc.status.INVALID_ARGUMENT), String(status['grpc-message']));
  t.match(decodeURIComponent(String(status['grpc-message'])), /not a ModelInferRequest message/);
});

t.test('a call whose message stalls is reset after front.body_timeout_ms, as HTTP answers 408', async (t) => {
  const { code, seconds } = await stalled(4_000_000, 1_000_000);
  t.equal(code, 8, 'RST_STREAM CANCEL (RFC 9113 7)');
  t.ok(seconds >= 2 && seconds < 15, `after ${seconds.toFixed(1)} s`);
  t.same(await call('ServerLive', {}), { live: true }, 'the service unharmed');
});

t.test("a call's bytes count against front.max_inflight_bytes as they arrive, as HTTP's do", async (t) => {
  // Two calls, each 7 of a 10 MB message (a message may be as large as the front's 12 MiB, not
  // larger): together past the budget, so whichever comes second is refused before the deadline,
  // not held, and the other holds its 7 MB until its deadline.
  const [refused, held] = (await Promise.all([stalled(10_000_000, 7_000_000), stalled(10_000_000, 7_000_000)])).sort(
    (a, b) => a.code - b.code,
  );
  t.equal(refused.code, 7, 'RST_STREAM REFUSED_STREAM: not processed, may be retried (RFC 9113 8.7)');
  t.ok(refused.seconds < 2.5, `at once (${refused.seconds.toFixed(1)} s), not at the 3 s deadline`);
  t.equal(held.code, 8, 'the other reset at its deadline (CANCEL)');
  // Its bytes were given back: a batch of 32 (4.8 MB) fits again.
  const tiles = await Promise.all(Array.from({ length: 32 }, (_, i) => pixels(cellularPng(300 + i))));
  const { outputs } = await infer('tile-embed-b32', [image(tiles, 224)]);
  t.same(outputs.get('embedding')!.shape, [32, 160]);
});

t.test("a call's bytes are given back when it is answered, read or not; an answer not taken is let go", async (t) => {
  // Eight 512 px tiles are 6.3 MB: two such calls are past the front's 12 MB. The first client
  // never reads its answer (2 MB of masks, more than HTTP/2's window lets through unread); its
  // request's bytes must come back when the call is answered, not when its stream closes.
  const method = (definition['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition).ModelInfer;
  const rgb = Buffer.alloc(8 * 512 * 512 * 3, 200);
  const message = method.requestSerialize({
    model_name: 'tissue-seg',
    inputs: [{ name: 'image', datatype: 'UINT8', shape: [8, 512, 512, 3] }],
    raw_input_contents: [rgb],
  });
  const open = (session: ReturnType<typeof connect>) => modelInferStream(session).end(framed(message));
  const unread = connect(`http://127.0.0.1:${grpcPort}`, { maxSessionMemory: 64 });
  t.teardown(() => unread.destroy());
  const untaken = open(unread); // never read
  const untakenClosed = new Promise<number>((resolve) => {
    untaken.once('close', () => resolve(untaken.rstCode ?? -1));
    setTimeout(() => resolve(-1), 60_000).unref();
  });
  // Answered (its headers go with its answer) before the second call's bytes come to share the budget.
  await new Promise((resolve) => untaken.once('response', resolve));
  const reader = connect(`http://127.0.0.1:${grpcPort}`, { maxSessionMemory: 64 });
  t.teardown(() => reader.close());
  const until = Date.now() + 60_000;
  let status = '';
  while (status !== '0' && Date.now() < until) {
    const stream = open(reader);
    stream.resume();
    status = await new Promise<string>((resolve) => {
      let got = '';
      stream.on('response', (headers) => (got = String(headers['grpc-status'] ?? got)));
      stream.on('trailers', (trailers) => (got = String(trailers['grpc-status'] ?? got)));
      stream.once('close', () => resolve(got || `rst ${stream.rstCode}`));
    });
    if (status !== '0') await new Promise((resolve) => setTimeout(resolve, 500));
  }
  t.equal(status, '0', 'a second call of 6.3 MB is answered while the first answer lies unread');
  // The answer is held (against the budget) until taken, for front.body_timeout_ms at most.
  t.equal(await untakenClosed, 8, 'the untaken answer is let go: RST_STREAM CANCEL');
});

t.test('health and metadata calls', async (t) => {
  t.same(await call('ServerLive', {}), { live: true });
  t.same(await call('ServerReady', {}), { ready: true });
  t.ok((await call('ServerMetadata', {})).extensions.includes('binary_tensor_data'));
  t.same(await call('ModelReady', { name: 'tile-embed' }), { ready: true });
  t.same(await call('ModelReady', { name: 'broken' }), { ready: false });
  const meta = await call('ModelMetadata', { name: 'gene-expr', version: '1.1.0' });
  t.match(meta, { name: 'gene-expr', versions: ['1.1.0'], platform: 'onnxruntime_onnx' });
  t.same(meta.outputs, [
    { name: 'prediction', datatype: 'FP32', shape: [-1, 21] },
    { name: 'embedding', datatype: 'FP32', shape: [-1, 256] },
  ]);
  t.equal((await failure('ModelMetadata', { name: 'nope' })).code, grpc.status.NOT_FOUND);
  t.equal((await failure('ModelReady', { name: 'tile-embed', version: '9' })).code, grpc.status.NOT_FOUND);
});

t.test('every shipped model: outputs as the contract routes give them', async (t) => {
  const small = [cellularPng(21), cellularPng(22)];
  const rgb = await Promise.all(small.map(pixels));
  const embeds = await Promise.all(small.map((png) => contract('/api/embed/tile-embed', tileRequest(png))));
  for (const inputs of [[image(rgb, 224)], [pngs(small)]]) {
    const { response, outputs } = await infer('tile-embed', inputs, { id: 'g1' });
    t.match(response, {
      model_name: 'tile-embed',
      model_version: '1.0.0',
      id: 'g1',
      parameters: { trained: { bool_param: false } },
    });
    const e = outputs.get('embedding')!;
    t.same(e.shape, [2, 160]);
    for (let i = 0; i < 2; i++)
      t.ok(
        same(Array.from(e.values).slice(i * 160, (i + 1) * 160), Float32Array.from(embeds[i].output)),
        `tile-embed ${inputs[0].datatype}: tile ${i}`,
      );
  }
  // Typed contents instead of raw bytes.
  const typed = await call('ModelInfer', {
    model_name: 'tile-embed',
    inputs: [
      { name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3], contents: { uint_contents: Array.from(rgb[0]) } },
    ],
  });
  t.ok(
    same(new Float32Array(new Uint8Array(typed.raw_output_contents[0]).buffer), Float32Array.from(embeds[0].output)),
    'uint_contents',
  );

  const bulk = Array.from({ length: 50 }, (_, i) => i % 7);
  const genes = await contract(
    '/api/predict/gene-expr?mode=prediction_with_embedding',
    tileRequest(small[0], { bulk_rna: bulk }),
  );
  const g = await infer(
    'gene-expr',
    [image([rgb[0]], 224), { name: 'bulk_rna', datatype: 'FP32', shape: [1, 50], data: bulk }],
    { parameters: { resolution: { string_param: '0.5' } } },
  );
  t.ok(same(g.outputs.get('prediction')!.values, Float32Array.from(genes.output)), 'gene-expr prediction');
  t.ok(same(g.outputs.get('embedding')!.values, Float32Array.from(genes.embedding)), 'gene-expr embedding');

  const seg = fixturePng('he-mixed');
  const mask = await contract('/api/predict/tissue-seg', tileRequest(seg));
  const s = await infer('tissue-seg', [pngs([seg])], { outputs: [{ name: 'mask' }] });
  t.same([...s.outputs.keys()], ['mask']);
  t.ok(same(s.outputs.get('mask')!.values, mask.output), 'tissue-seg mask');
});

/** A ModelInfer call as it ends: its error or answer, its initial metadata (none sent: empty),
 *  and the trailers of its status. */
function inferCall(request: Json) {
  return new Promise<{ err: grpc.ServiceError | null; initial: grpc.Metadata; trailing: grpc.Metadata }>((resolve) => {
    let initial = new grpc.Metadata();
    let err: grpc.ServiceError | null = null;
    const unary = stub.ModelInfer(request, (e: grpc.ServiceError | null) => (err = e));
    unary.on('metadata', (m: grpc.Metadata) => (initial = m));
    unary.on('status', (status: grpc.StatusObject) =>
      setImmediate(() => resolve({ err, initial, trailing: status.metadata })),
    );
  });
}

t.test('ModelInfer sends x-model-sha256 in its initial metadata, as /api/metadata gives it', async (t) => {
  for (const [model, size, resolution] of [
    ['tile-embed', 224, '0.5'],
    ['gene-expr', 224, '0.5'],
    ['tissue-seg', 512, '8'],
  ] as const) {
    const { sha256 } = (await (await server.get(`/api/metadata/${model}`)).json()) as Json;
    t.match(sha256, /^[0-9a-f]{64}$/, model);
    const png = pngs([cellularPng(23, size)]);
    const { err, initial, trailing } = await inferCall({
      model_name: model,
      inputs: [{ name: png.name, datatype: png.datatype, shape: png.shape }],
      raw_input_contents: [tensorBytes(png)],
      parameters: { resolution: { string_param: resolution } },
    });
    t.equal(err, null, model);
    t.same(initial.get('x-model-sha256'), [sha256], `${model}: initial metadata`);
    t.same(trailing.get('x-model-sha256'), [], `${model}: not repeated in the trailers`);
  }
  const refused = await inferCall({ model_name: 'tile-embed', inputs: [] });
  t.equal(refused.err?.code, grpc.status.INVALID_ARGUMENT);
  t.same(refused.initial.get('x-model-sha256'), [], 'no model answered a refused call');
});

t.test('a batch of 32 equals 32 singles, tile for tile', async (t) => {
  const rgb = await Promise.all(Array.from({ length: 32 }, (_, i) => pixels(cellularPng(300 + i))));
  const batch = Array.from((await infer('tile-embed-b32', [image(rgb, 224)])).outputs.get('embedding')!.values);
  const singles = await Promise.all(rgb.map((one) => infer('tile-embed-b32', [image([one], 224)])));
  for (let i = 0; i < 32; i++)
    t.ok(same(batch.slice(i * 160, (i + 1) * 160), singles[i].outputs.get('embedding')!.values), `tile ${i}`);
  const over = await failure('ModelInfer', {
    model_name: 'tile-embed-b32',
    inputs: [{ name: 'image', datatype: 'UINT8', shape: [33, 224, 224, 3] }],
    raw_input_contents: [Buffer.concat([...rgb, rgb[0]])],
  });
  t.equal(over.code, grpc.status.INVALID_ARGUMENT);
  t.match(over.details, /33 tiles, expected 1 to 32/);
});

t.test(
  'malformed requests: INVALID_ARGUMENT naming the input; NOT_FOUND, UNAVAILABLE; the service unharmed',
  async (t) => {
    const rgb = await pixels(cellularPng(23));
    const request = (input: Json, raw: Buffer[] = [rgb]) => ({
      model_name: 'tile-embed',
      inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3], ...input }],
      raw_input_contents: raw,
    });
    const cases: [string, Json, RegExp][] = [
      [
        'shape does not match the data',
        request({ shape: [2, 224, 224, 3] }),
        /input 'image': shape \[2, 224, 224, 3\] holds/,
      ],
      ['wrong datatype', request({ datatype: 'FP32' }), /input 'image' has datatype FP32, expected UINT8/],
      [
        'raw contents not one per input',
        request({}, [rgb, rgb]),
        /raw_input_contents has 2 entries, expected one per input \(1\)/,
      ],
      [
        'a BYTES length prefix past the data',
        request({ datatype: 'BYTES', shape: [1] }, [Buffer.from([200, 0, 0, 0, 1])]),
        /BYTES element 0 declares 200 bytes/,
      ],
      [
        'a tile of the wrong size',
        request({ shape: [1, 8, 8, 3] }, [Buffer.alloc(192)]),
        /input 'image', tile 0: tile-embed takes 224x224 tiles/,
      ],
      [
        'not a PNG',
        request({ datatype: 'BYTES', shape: [1] }, [Buffer.from([3, 0, 0, 0, 1, 2, 3])]),
        /input 'image', tile 0: .*PNG/,
      ],
      [
        'resolution out of tolerance',
        { ...request({}), parameters: { resolution: { string_param: '4' } } },
        /input 'resolution', tile 0/,
      ],
      ['an output the model does not have', { ...request({}), outputs: [{ name: 'mask' }] }, /output 'mask'/],
    ];
    for (const [what, r, message] of cases) {
      const err = await failure('ModelInfer', r);
      t.equal(err.code, grpc.status.INVALID_ARGUMENT, what);
      t.match(err.details, message, `${what}: ${err.details}`);
    }
    t.equal((await failure('ModelInfer', { ...request({}), model_name: 'nope' })).code, grpc.status.NOT_FOUND);
    t.equal((await failure('ModelInfer', { ...request({}), model_name: 'broken' })).code, grpc.status.UNAVAILABLE);
    t.same(await call('ServerReady', {}), { ready: true });
    t.equal((await infer('tile-embed', [image([rgb], 224)])).outputs.get('embedding')!.values.length, 160);
    const { workers } = (await (await server.get('/diagnostics')).json()) as {
      workers: { id: string; restarts: number }[];
    };
    t.same(
      workers.filter((w) => w.restarts > 0 && !w.id.startsWith('broken')).map((w) => w.id),
      [],
      'no worker restarted (the broken package is retried by design)',
    );
  },
);

t.test(
  'ModelInfer calls are counted in /metrics and the usage log as endpoint "grpc"; an unknown model in neither',
  async (t) => {
    const rgb = await pixels(cellularPng(24));
    await infer('tile-embed', [image([rgb], 224)]);
    const raw = { inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3] }], raw_input_contents: [rgb] };
    t.equal((await failure('ModelInfer', { ...raw, model_name: 'nope' })).code, grpc.status.NOT_FOUND);
    const metrics = await (await server.get('/metrics')).text();
    t.match(metrics, /tile_requests_total\{model="tile-embed",endpoint="grpc",status="200"\} [1-9]/);
    t.match(metrics, /tile_request_duration_seconds_count\{model="tile-embed",endpoint="grpc"\} [1-9]/);
    t.notMatch(metrics, /model="nope"/);
    // Fronts send their usage entries to the supervisor in batches: wait for this call's.
    let grpcLines: Json[] = [];
    const mine = () => grpcLines.find((u) => u.tile === '1x224x224');
    for (let i = 0; i < 50 && !mine(); i++) {
      const { usage } = (await (await server.get('/diagnostics?categories=usage')).json()) as { usage: Json[] };
      grpcLines = usage.filter((u) => u.endpoint === 'grpc');
      if (!mine()) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    t.match(mine(), { model: 'tile-embed', endpoint: 'grpc', mode: 'v2', status: 200, duration_ms: Number });
    t.notOk(
      grpcLines.some((u) => u.model === 'nope'),
      'no line for a model not served',
    );
  },
);
