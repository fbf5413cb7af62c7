// The Open Inference Protocol's REST plugin in process (the real app over a FakeBackend, the
// client of test/helpers/v2-client.ts): framing and its errors, states as statuses, the body
// limit. Outputs against real models: test/e2e/v2.test.ts and v2-grpc.test.ts.
import t, { type Test } from 'tap';
import { fakeService } from './helpers/fake-backend.js';
import { inferBody, type Tensor } from './helpers/v2-client.js';
import { callStream, framed, modelInferStream, SERVER_LIVE } from './helpers/grpc-wire.js';
import { callHeaders, FLAG, FRAME, frame, indexed, literal, rawConnection } from './helpers/h2-frames.js';
import { join } from 'node:path';
import http2 from 'node:http2';
import net from 'node:net';
import { createRequire } from 'node:module';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import pino from 'pino';
import {
  CALL_BYTES,
  CONTROL_STREAMS,
  LOADER_OPTIONS,
  MAX_DETAILS,
  MAX_STREAMS,
  messageBuffer,
  PROTO_FILE,
  startGrpc,
} from '../src/front/v2/grpc-server.js';
import { MessageDecoder } from '../src/front/v2/message-decoder.js';
import { V2Service } from '../src/front/v2/v2-service.js';
import { planJobs } from '../src/front/v2/inference.js';
import { modelMetadata } from '../src/front/v2/model-tensors.js';
import { readPackage } from '../src/model-package/model-package.js';
import { MODELS, waitFor } from './helpers/server.js';
import type { GrpcCall } from '../src/front/plugins/usage.js';
import { WINDOW_MS } from '../src/front/pace.js';

type Json = Record<string, any>;
/** The protocol's service, as grpc-js loads it from the .proto. */
const { inference } = grpc.loadPackageDefinition(protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS)) as any;
const tile = (n: number): Tensor => ({
  name: 'image',
  datatype: 'UINT8',
  shape: [n, 224, 224, 3],
  data: new Uint8Array(n * 224 * 224 * 3).fill(7),
});

t.test('a batch in JSON and in binary; outputs picked; the id echoed', async (t) => {
  const { app, backend } = await fakeService();
  const json = inferBody([tile(3)], { id: 'x', outputs: ['embedding'] });
  const res = await app.inject({
    method: 'POST',
    url: '/v2/models/gene-expr/infer',
    headers: { 'content-type': 'application/json' },
    payload: json.header,
  });
  t.equal(res.statusCode, 200, res.body.slice(0, 200));
  t.match(res.json(), {
    model_name: 'gene-expr',
    model_version: '1.1.0',
    id: 'x',
    outputs: [{ name: 'embedding', datatype: 'FP32', shape: [3, 256] }],
  });
  t.equal(backend.jobs.length, 3, 'three tiles');
  t.same(
    backend.jobs.map((j) => [j.task, j.image.format, j.width]),
    Array(3).fill(['embedding', 'rgb', 224]),
  );
  const binary = inferBody([tile(2)], { binaryInputs: true, binaryOutputs: true });
  const bin = await app.inject({
    method: 'POST',
    url: '/v2/models/tile-embed/infer',
    headers: {
      'content-type': 'application/octet-stream',
      'inference-header-content-length': String(binary.header.length),
    },
    payload: Buffer.concat([binary.header, ...binary.binary]),
  });
  t.equal(bin.statusCode, 200);
  const length = Number(bin.headers['inference-header-content-length']);
  const header = JSON.parse(bin.rawPayload.subarray(0, length).toString()) as Json;
  t.same(header.outputs, [
    { name: 'embedding', datatype: 'FP32', shape: [2, 160], parameters: { binary_data_size: 2 * 160 * 4 } },
  ]);
  t.equal(bin.rawPayload.length, length + 2 * 160 * 4, 'the raw tensor after the header');
  const sent = binary.header.length + binary.binary.reduce((n, b) => n + b.length, 0);
  t.same(
    backend.spent.map((s) => s?.byteLength),
    [undefined, undefined, undefined, sent, sent],
    'a binary request gives up its body once its tiles are answered (free-bytes.ts); a JSON one, whose tiles are made from its numbers, nothing',
  );
  const unknown = await app.inject({
    method: 'POST',
    url: '/v2/models/nope/infer',
    headers: { 'content-type': 'application/json' },
    payload: json.header,
  });
  t.equal(unknown.statusCode, 404);
  t.same(
    backend.usage.map((u) => [u.model, u.endpoint, u.mode, u.status, u.tile]),
    [
      ['gene-expr', 'v2', 'v2', 200, '3x224x224'],
      ['tile-embed', 'v2', 'v2', 200, '2x224x224'],
    ],
    'each infer request of a served model in the usage log, as contract requests are (a model not served is not)',
  );
  const metrics = await (await app.inject({ method: 'GET', url: '/metrics' })).body;
  t.match(metrics, /tile_requests_total\{model="tile-embed",endpoint="v2",status="200"\} 1/, 'and in the metrics');
});

t.test('framing errors are 400 {"error"}; states are 404 and 503', async (t) => {
  const { app, backend } = await fakeService({ body_limit_bytes: 1024 * 1024 });
  const good = inferBody([tile(1)], { binaryInputs: true });
  const body = Buffer.concat([good.header, ...good.binary]);
  const post = (payload: Buffer, headers: Record<string, string>, model = 'tile-embed') =>
    app.inject({
      method: 'POST',
      url: `/v2/models/${model}/infer`,
      headers: { 'content-type': 'application/octet-stream', ...headers },
      payload,
    });
  const length = { 'inference-header-content-length': String(good.header.length) };
  for (const [what, res, message] of [
    [
      'header length past the body',
      await post(body, { 'inference-header-content-length': String(body.length + 1) }),
      /past the end/,
    ],
    [
      'binary data left over',
      await post(Buffer.concat([body, Buffer.alloc(5)]), length),
      /add up to 150528 bytes, but 150533/,
    ],
    ['not JSON', await post(Buffer.from('nope'), {}), /malformed/],
    ['over the body limit', await post(Buffer.alloc(1024 * 1024 + 1), {}), /over the limit of 1048576 bytes/],
  ] as const) {
    t.equal(res.statusCode, 400, what);
    t.match(res.json(), { error: message }, what);
  }
  t.equal((await post(body, length, 'nope')).statusCode, 404);
  t.equal(
    (await post(Buffer.from('nope'), {}, 'tile-embed/versions/9')).statusCode,
    404,
    'a version not served, before the body',
  );
  t.equal((await post(body, length, 'tile-embed/versions/')).statusCode, 404, 'an empty version');
  t.equal((await app.inject('/v2/models/tile-embed/versions//ready')).statusCode, 404, 'an empty version, ready');
  t.match((await app.inject('/v2/nothing')).json(), { error: /not a path/ });
  const malformed = await app.inject({ method: 'POST', url: '/v2/nothing', payload: 'nope' });
  t.same(
    [malformed.statusCode, malformed.json()],
    [404, { error: 'POST /v2/nothing is not a path of the Open Inference Protocol this service serves' }],
    'a body to a path not served: 404 before it is read',
  );
  backend.setState('tile-embed', 'loading');
  const loading = await post(body, length);
  t.equal(loading.statusCode, 503);
  t.ok(loading.headers['retry-after']);
  t.equal((await app.inject('/v2/models/tile-embed/ready')).statusCode, 503);
  t.equal((await app.inject('/v2/health/ready')).statusCode, 503);
  t.equal((await app.inject('/v2/health/live')).statusCode, 200);
});

t.test('bodies built to cost: each refused at its first fault, in bounded time and words', async (t) => {
  const { app, backend } = await fakeService();
  const json = (payload: string | Buffer, headers: Record<string, string> = {}) =>
    app.inject({
      method: 'POST',
      url: '/v2/models/tile-embed/infer',
      headers: { 'content-type': 'application/json', ...headers },
      payload,
    });
  // A million inputs that each miss every field: one error, not a million (allErrors listed them
  // all: 44 s, 4 GB and a 500 for 3.6 million).
  const many = await json(`{"inputs":[${Array(1_000_000).fill('{}').join(',')}]}`);
  t.equal(many.statusCode, 400);
  t.ok(many.body.length < 1000, `one error: ${many.body.slice(0, 200)}`);
  // An output asked for again and again: refused, not answered as often as asked.
  const twice = inferBody([tile(1)], { outputs: ['embedding', 'embedding'] });
  const repeated = await json(twice.header);
  t.equal(repeated.statusCode, 400);
  t.match(repeated.json(), { error: "output 'embedding' is asked for twice" });
  // BYTES data of 8 MB of zeros reads as 2 million empty elements: refused past the shape's one.
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: 'image', datatype: 'BYTES', shape: [1], parameters: { binary_data_size: 8 << 20 } }],
    }),
  );
  const zeros = await json(Buffer.concat([header, Buffer.alloc(8 << 20)]), {
    'content-type': 'application/octet-stream',
    'inference-header-content-length': String(header.length),
  });
  t.equal(zeros.statusCode, 400);
  t.match(zeros.json(), { error: /holds 1 BYTES elements, the data has more/ });
  // A 0 in the shape: empty data fits any N, which is bounded before a tile is made for each
  // ([100000000, 0, 224, 3] took a front past its heap limit; 2^32 was a 500).
  for (const n of [100_000_000, 2 ** 32]) {
    const empty = await json(
      JSON.stringify({ inputs: [{ name: 'image', datatype: 'UINT8', shape: [n, 0, 224, 3], data: [] }] }),
    );
    t.equal(empty.statusCode, 400);
    t.match(empty.json(), {
      error: `input 'image' holds ${n} tiles, expected 1 to 16 (tile-embed's batch.max) per request`,
    });
  }
  t.equal(backend.jobs.length, 0, 'nothing was run');
});

t.test('JSON data nested row-major reads as the same data flat', async (t) => {
  const { app, backend } = await fakeService();
  const pixels = Array.from({ length: 2 * 224 * 224 * 3 }, (_, i) => (i * 31) % 256);
  // [2, 224, 224, 3] as nested arrays, the shape's own nesting.
  const nested = Array.from({ length: 2 }, (_, n) =>
    Array.from({ length: 224 }, (_, y) =>
      Array.from({ length: 224 }, (_, x) =>
        pixels.slice(((n * 224 + y) * 224 + x) * 3, ((n * 224 + y) * 224 + x) * 3 + 3),
      ),
    ),
  );
  // Flat, nested by the shape, nested otherwise, and flat at first with a nested tail.
  for (const data of [
    pixels,
    nested,
    [pixels.slice(0, 100), [pixels.slice(100)]],
    [...pixels.slice(0, 9), pixels.slice(9)],
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/v2/models/tile-embed/infer',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ inputs: [{ name: 'image', datatype: 'UINT8', shape: [2, 224, 224, 3], data }] }),
    });
    t.equal(res.statusCode, 200, res.body.slice(0, 200));
  }
  t.equal(backend.jobs.length, 8);
  const bytes = backend.jobs.map((j) => Buffer.from(j.image.bytes));
  const expected = [0, 1].map((n) => Buffer.from(pixels.slice(n * 224 * 224 * 3, (n + 1) * 224 * 224 * 3)));
  for (const [i, b] of bytes.entries()) t.ok(b.equals(expected[i % 2]), `tile ${i} as sent`);
  const short = await app.inject({
    method: 'POST',
    url: '/v2/models/tile-embed/infer',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({
      inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3], data: [[1, 2], [3]] }],
    }),
  });
  t.equal(short.statusCode, 400);
  t.match(short.json().error, /holds 150528 elements, data has 3/);
});

t.test('resolution and float data: decimal text only, [N] only, NaN named as NaN', async (t) => {
  const { app } = await fakeService();
  const post = async (body: { header: Buffer; binary: Buffer[] }) => {
    const res = await app.inject({
      method: 'POST',
      url: '/v2/models/gene-expr/infer',
      headers: {
        'content-type': 'application/octet-stream',
        'inference-header-content-length': String(body.header.length),
      },
      payload: Buffer.concat([body.header, ...body.binary]),
    });
    return { status: res.statusCode, error: res.json().error as string };
  };
  t.match(await post(inferBody([tile(1)], { binaryInputs: true, parameters: { resolution: '0x1' } })), {
    status: 400,
    error: `parameter 'resolution' is "0x1", expected a number (MPP)`,
  });
  const resolution: Tensor = { name: 'resolution', datatype: 'FP32', shape: [1, 1], data: [0.5] };
  t.match(await post(inferBody([tile(1), resolution], { binaryInputs: true })), {
    status: 400,
    error: /input 'resolution': shape \[1, 1\], expected \[N\]/,
  });
  const bulk: Tensor = { name: 'bulk_rna', datatype: 'FP32', shape: [1, 50], data: Array(50).fill(Number.NaN) };
  t.match(await post(inferBody([tile(1), bulk], { binaryInputs: true, outputs: ['prediction'] })), {
    status: 400,
    error: /element 0 is NaN, expected a finite number/,
  });
  // Finite as a double, Infinity as a float32: the model would have answered NaN.
  const huge: Tensor = { name: 'bulk_rna', datatype: 'FP32', shape: [1, 50], data: [1, 1e39, ...Array(48).fill(1)] };
  const json = inferBody([tile(1), huge], { outputs: ['prediction'] });
  const res = await app.inject({
    method: 'POST',
    url: '/v2/models/gene-expr/infer',
    headers: { 'content-type': 'application/json' },
    payload: json.header,
  });
  t.equal(res.statusCode, 400);
  t.match(res.json(), { error: "input 'bulk_rna': element 1 is 1e+39, past FP32's range (3.4e38)" });
});

t.test('bulk_rna of a one-gene model is [N, 1], as its metadata says; resolution [N]', async (t) => {
  const { manifest } = readPackage(join(MODELS, 'gene-expr'));
  const oneGene = { ...manifest, genes: { ...manifest.genes!, input: manifest.genes!.input.slice(0, 1) } };
  const request = (shape: number[], name = 'bulk_rna') => ({
    inputs: [
      { name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3], data: { raw: Buffer.alloc(224 * 224 * 3, 7) } },
      { name, datatype: 'FP32', shape, data: { values: [0.5] } },
    ],
    outputs: [{ name: 'prediction' }],
  });
  t.same(modelMetadata('gene-expr', oneGene).inputs.find((i) => i.name === 'bulk_rna')?.shape, [-1, 1]);
  t.equal(planJobs(oneGene, request([1, 1]), 1 << 30).jobs.length, 1, '[1, 1] taken');
  t.throws(() => planJobs(oneGene, request([1]), 1 << 30), /input 'bulk_rna': shape \[1\], expected \[N, 1\]/);
  t.equal(planJobs(oneGene, request([1], 'resolution'), 1 << 30).jobs.length, 1, 'resolution [1] taken');
  // A model that takes its counts untransformed gets them as float32: past its range, refused.
  const untransformed = { ...oneGene, genes: { ...oneGene.genes, bulk_transform: 'none' as const } };
  const huge = request([1, 1]);
  huge.inputs[1] = { ...huge.inputs[1], datatype: 'FP64', data: { values: [1e39] } };
  t.throws(() => planJobs(untransformed, huge, 1 << 30), /as float32: they should be within its range/);
  t.equal(planJobs(oneGene, huge, 1 << 30).jobs.length, 1, 'taken where they are transformed');
});

t.test("a ModelInferRequest's bytes: the buffer grpc-js framed it in, when it holds nothing else", async (t) => {
  const framed = Buffer.alloc(5 + 150_528);
  t.equal(messageBuffer(framed.subarray(5)).byteLength, 5 + 150_528, 'behind its 5-byte prefix, alone: that buffer');
  const pooled = Buffer.from('a small message');
  t.equal(messageBuffer(pooled), pooled, 'a slice of the pool: itself, which freeBytes leaves alone');
  const shared = Buffer.alloc(10 + 150_528).subarray(5, 5 + 150_528);
  t.equal(messageBuffer(shared), shared, 'bytes after it: itself');
});

/** startGrpc on a fake backend: the front's byte budget, a call's body timeout, its recorder, the
 *  connections it holds and how long one may idle. */
async function fakeGrpc(
  t: Test,
  {
    budget = 256 << 20,
    ms = 10_000,
    record,
    maxConnections = 1000,
    idleMs = 60_000,
    headersMs = Math.min(ms, 10_000),
  }: {
    budget?: number;
    ms?: number;
    record?: (call: GrpcCall) => void;
    maxConnections?: number;
    idleMs?: number;
    headersMs?: number;
  },
) {
  // The gRPC server here takes maxMessageBytes below; the config's body limit only has to fit the budget.
  const { backend, config } = await fakeService({
    body_limit_bytes: Math.min(budget, 16 << 20),
    front: { max_inflight_bytes: budget },
  });
  const { server, port } = await startGrpc(new V2Service(backend, config), {
    host: '127.0.0.1',
    port: 0,
    maxMessageBytes: 64 << 20,
    maxInflightBytes: budget,
    headersTimeoutMs: headersMs,
    bodyTimeoutMs: ms,
    maxConnections,
    idleMs,
    logger: pino({ level: 'silent' }),
    record,
  });
  t.teardown(() => server.forceShutdown());
  /** A grpc-js client of it, from the protocol's .proto, closed with the test. */
  const client = (channelOptions: grpc.ChannelOptions = {}) => {
    const stub = new inference.GRPCInferenceService(
      `127.0.0.1:${port}`,
      grpc.credentials.createInsecure(),
      channelOptions,
    );
    t.teardown(() => stub.close());
    return stub;
  };
  return { backend, port, url: `http://127.0.0.1:${port}`, client };
}

t.test('the gRPC server reads calls with MessageDecoder: a batch in many frames is answered', async (t) => {
  const recorded: GrpcCall[] = [];
  const { backend, port, client } = await fakeGrpc(t, { record: (call) => recorded.push(call) });
  const require = createRequire(import.meta.url);
  const decoders = require('@grpc/grpc-js/build/src/stream-decoder.js');
  t.equal(decoders.StreamDecoder, MessageDecoder, "grpc-js's calls construct ours");
  const stub = client();
  const pixels = Buffer.alloc(8 * 224 * 224 * 3, 5);
  const response: any = await new Promise((resolve, reject) =>
    stub.ModelInfer(
      {
        model_name: 'tile-embed',
        inputs: [{ name: 'image', datatype: 'UINT8', shape: [8, 224, 224, 3] }],
        raw_input_contents: [pixels],
      },
      (err: Error | null, r: unknown) => (err ? reject(err) : resolve(r)),
    ),
  );
  t.same(response.outputs[0].shape, [8, 160], 'a 1.2 MB message, 16 KiB frames: 8 embeddings');
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.notOk(backend.signals.at(-1)?.aborted, "an answered call's tiles are not cancelled after the answer");
  // RFC 9113 6.5.2: SETTINGS_MAX_CONCURRENT_STREAMS, the calls one connection may hold open.
  const session = http2.connect(`http://127.0.0.1:${port}`);
  t.teardown(() => session.close());
  const settings = await new Promise<http2.Settings>((resolve) => session.once('remoteSettings', resolve));
  t.equal(settings.maxConcurrentStreams, MAX_STREAMS);
  // A client that compresses its messages (gzip) is told to send them uncompressed.
  const gzip = client({ 'grpc.default_compression_algorithm': 2 });
  const refused: grpc.ServiceError = await new Promise((resolve) =>
    gzip.ModelInfer(
      {
        model_name: 'tile-embed',
        inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3] }],
        raw_input_contents: [pixels.subarray(0, 224 * 224 * 3)],
      },
      (err: grpc.ServiceError) => resolve(err),
    ),
  );
  t.equal(refused?.code, grpc.status.RESOURCE_EXHAUSTED);
  t.match(refused?.details, /uncompressed \(grpc-encoding identity\)/);
  t.equal(backend.jobs.length, 8, 'nothing of it reached a worker');
  // Each ModelInfer call is counted (the refused gzip one never became a call).
  t.equal(recorded.length, 1);
  t.match(recorded[0], { model: 'tile-embed', status: 200, ms: Number, shed: undefined, tile: '8x224x224' });
  const missing: grpc.ServiceError = await new Promise((resolve) =>
    stub.ModelInfer({ model_name: 'tile-embed', inputs: [] }, (err: grpc.ServiceError) => resolve(err)),
  );
  t.equal(missing.code, grpc.status.INVALID_ARGUMENT);
  t.match(recorded[1], { model: 'tile-embed', status: 400, tile: 'invalid' }, 'a refused call, its HTTP twin status');
  t.equal(backend.jobs.length, 8);
  t.ok(backend.jobs.every((j) => Buffer.from(j.image.bytes).equals(pixels.subarray(0, 224 * 224 * 3))));
});

/** A 512 px tile's mask asked for on a connection whose client takes nothing of its answer (RFC
 *  9113 6.9.2: a stream window of 0 lets no DATA through, the 256 KB mask stays with the front);
 *  once the answer is written, `closed`: the RST_STREAM code its stream closes with (-1: none). */
async function unreadMask(t: Test, url: string): Promise<{ closed: Promise<number> }> {
  const message: Buffer = inference.GRPCInferenceService.service.ModelInfer.requestSerialize({
    model_name: 'tissue-seg',
    inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 512, 512, 3] }],
    raw_input_contents: [Buffer.alloc(512 * 512 * 3, 9)],
    outputs: [{ name: 'mask' }],
  });
  const unread = http2.connect(url, { settings: { initialWindowSize: 0 } });
  t.teardown(() => unread.destroy());
  const stream = modelInferStream(unread);
  const closed = new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
  stream.end(framed(message));
  await new Promise((resolve) => stream.once('response', resolve));
  return { closed };
}

t.test("an answer not taken holds the front's budget until the body timeout lets it go", async (t) => {
  const limit = 1 << 20;
  const recorded: GrpcCall[] = [];
  const { backend, url } = await fakeGrpc(t, { budget: limit, ms: 500, record: (call) => recorded.push(call) });
  const started = performance.now();
  const { closed } = await unreadMask(t, url);
  const probe = backend.requestBytes();
  t.throws(() => probe.received(limit - 200_000), /front/i, 'its 256 KB answer counts against the 1 MiB budget');
  t.doesNotThrow(() => probe.received(limit - 300_000), 'the budget less the answer is free');
  probe.release();
  t.equal(await closed, http2.constants.NGHTTP2_CANCEL, 'reset with CANCEL');
  const ms = performance.now() - started;
  t.ok(ms >= 450 && ms < 5000, `after ${Math.round(ms)} ms, its client having taken nothing`);
  const whole = backend.requestBytes();
  t.doesNotThrow(() => whole.received(limit), 'the budget is whole again');
  whole.release();
  await waitFor(() => recorded.length === 1, 5000);
  t.match(recorded, [{ status: 499, shed: 'cancelled' }], 'recorded as never taken, not as answered');
});

t.test('an answer whose client falls behind its pace gives way when the budget is needed', async (t) => {
  const limit = 1 << 20;
  const recorded: GrpcCall[] = [];
  const { backend, url } = await fakeGrpc(t, { budget: limit, record: (call) => recorded.push(call) });
  const { closed } = await unreadMask(t, url);
  const probe = backend.requestBytes();
  t.throws(() => probe.received(limit - 200_000), /front/i, 'within its window its 256 KB answer keeps its place');
  backend.ahead = WINDOW_MS + 1;
  t.doesNotThrow(() => probe.received(limit - 200_000), 'past it, it gives way to a request that needs the room');
  probe.release();
  t.equal(await closed, http2.constants.NGHTTP2_CANCEL, 'its stream reset with CANCEL, long before the body timeout');
  await waitFor(() => recorded.length === 1, 5000);
  t.match(recorded, [{ status: 408, shed: 'evicted' }], 'recorded as let go of');
});

t.test('a front holds max_inflight_bytes / CALL_BYTES calls open; past it, calls are refused', async (t) => {
  const { url, backend, client } = await fakeGrpc(t, { budget: 8 * CALL_BYTES });
  const session = http2.connect(url);
  t.teardown(() => session.destroy());
  // Calls that send their headers and nothing else (RFC 9113 8.1: a request with no DATA yet).
  const open = () => {
    const stream = modelInferStream(session);
    const closed = new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
    return { stream, closed };
  };
  const calls = Array.from({ length: 10 }, open);
  const refused = await Promise.race([
    Promise.all(calls.slice(8).map((c) => c.closed)),
    new Promise((resolve) => setTimeout(() => resolve('still open'), 5000)),
  ]);
  const REFUSED = http2.constants.NGHTTP2_REFUSED_STREAM;
  t.same(refused, [REFUSED, REFUSED], 'the 9th and 10th: REFUSED_STREAM');
  t.ok(
    calls.slice(0, 8).every((c) => !c.stream.closed),
    'the first 8 stay open',
  );
  const bytes = backend.requestBytes();
  t.doesNotThrow(() => bytes.received(8 * CALL_BYTES), "the byte budget is untouched: HTTP's requests still fit");
  bytes.release();
  // Health and metadata calls may open as many again: a liveness probe is answered.
  const stub = client();
  const live = await new Promise((resolve) =>
    stub.ServerLive({}, (err: grpc.ServiceError | null, r: unknown) => resolve(err ? err.code : r)),
  );
  t.same(live, { live: true }, 'ServerLive answered while model calls are at their limit');
  calls[0]!.stream.close();
  await calls[0]!.closed;
  const next = open();
  const outcome = await Promise.race([next.closed, new Promise((resolve) => setTimeout(() => resolve('open'), 500))]);
  t.equal(outcome, 'open', 'a closed call gives its place back');
  // And the other way: health calls at their limit take no model call's place.
  for (const c of [...calls.slice(1, 8), next]) c.stream.close();
  await Promise.all([...calls.slice(1, 8), next].map((c) => c.closed));
  const probes = Array.from({ length: 9 }, () => {
    const stream = callStream(session, SERVER_LIVE);
    return new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
  });
  t.equal(await probes[8], REFUSED, 'the 9th health call held open: REFUSED_STREAM');
  const model = open();
  const kept = await Promise.race([model.closed, new Promise((resolve) => setTimeout(() => resolve('open'), 500))]);
  t.equal(kept, 'open', 'a model call opens beside them');
});

t.test('a connection holds CONTROL_STREAMS health calls open; past it, its calls are refused', async (t) => {
  const { url, client } = await fakeGrpc(t, {});
  const call = (session: http2.ClientHttp2Session) => {
    const stream = callStream(session, SERVER_LIVE);
    stream.end(framed(Buffer.alloc(0)));
    return new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
  };
  // Calls whose answers cannot be sent (RFC 9113 6.9.2: a window of 0): they stay open.
  const closed = http2.connect(url, { settings: { initialWindowSize: 0 } });
  t.teardown(() => closed.destroy());
  const held = Array.from({ length: CONTROL_STREAMS }, () => call(closed));
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.equal(await call(closed), http2.constants.NGHTTP2_REFUSED_STREAM, `the ${CONTROL_STREAMS + 1}th: REFUSED_STREAM`);
  const stillOpen = await Promise.race([
    Promise.any(held),
    new Promise((resolve) => setTimeout(() => resolve('open'), 200)),
  ]);
  t.equal(stillOpen, 'open', 'the others stay open');
  const stub = client();
  const live = await new Promise((resolve) =>
    stub.ServerLive({}, (err: grpc.ServiceError | null, r: unknown) => resolve(err ? err.code : r)),
  );
  t.same(live, { live: true }, 'another connection is answered');
});

t.test('an answer taken slowly but steadily is written to its end, past the body timeout', async (t) => {
  const budget = 16 << 20;
  const { url, backend } = await fakeGrpc(t, { ms: 500, budget });
  const message: Buffer = inference.GRPCInferenceService.service.ModelInfer.requestSerialize({
    model_name: 'tissue-seg',
    inputs: [{ name: 'image', datatype: 'UINT8', shape: [8, 512, 512, 3] }],
    raw_input_contents: [Buffer.alloc(8 * 512 * 512 * 3, 9)],
    outputs: [{ name: 'mask' }],
  });
  // A window of 256 KiB: Node's client opens its 64 KiB window only as it reads, a read per tick.
  const session = http2.connect(url, { settings: { initialWindowSize: 256 << 10 } });
  t.teardown(() => session.destroy());
  let run!: () => void;
  backend.gate = new Promise((resolve) => (run = resolve));
  const stream = modelInferStream(session);
  stream.pause();
  stream.end(framed(message));
  // Its model takes WINDOW_MS: its client's pace counts from its answer's first byte, not before.
  await new Promise((resolve) => setTimeout(resolve, 300));
  backend.ahead = WINDOW_MS + 1;
  run();
  let status = '';
  stream.on('trailers', (trailers) => (status = String(trailers['grpc-status'])));
  const started = performance.now();
  // 2 MB of masks taken 192 KB at a time, every 100 ms: about 1.1 s, past the 500 ms timeout,
  // each piece well within it.
  let taken = 0;
  const reader = setInterval(() => {
    for (let chunk: Buffer | null, n = 0; n < 192 * 1024 && (chunk = stream.read()) !== null; n += chunk.length)
      taken += chunk.length;
  }, 100);
  const closed = new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
  // Its pace (1.9 MiB/s against pace.ts's 1 MiB/s) made up, once its window (WINDOW_MS of credit)
  // is taken away, by the pieces it takes: a request that needs the room it holds is refused, not
  // let in at its cost.
  await new Promise((resolve) => stream.once('response', resolve));
  backend.ahead += WINDOW_MS + 1;
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.throws(() => backend.requestBytes().received(budget - (1 << 20)), /front/i, 'it keeps its place');
  const code = await closed;
  clearInterval(reader);
  const ms = performance.now() - started;
  t.equal(code, http2.constants.NGHTTP2_NO_ERROR, 'not reset');
  t.equal(status, '0', 'OK');
  t.ok(taken > 8 * 512 * 512 && ms > 800, `${taken} bytes taken in ${Math.round(ms)} ms`);
});

t.test('the gRPC port holds maxConnections connections, and lets one that idles past idleMs go', async (t) => {
  const { port } = await fakeGrpc(t, { maxConnections: 2, idleMs: 300 });
  // RFC 9113 3.4: the client's preface, then nothing.
  const connection = () => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.resume();
    socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const started = performance.now();
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now() - started)));
    return { socket, closed };
  };
  const held = [connection(), connection()];
  await new Promise((resolve) => setTimeout(resolve, 50)); // both accepted
  const third = await connection().closed;
  t.ok(third < 250, `a third is closed at once (${Math.round(third)} ms), before the idle timeout`);
  for (const { closed } of held) {
    const ms = await closed;
    t.ok(ms >= 250 && ms < 5000, `an idle one after ${Math.round(ms)} ms`);
  }
});

t.test("a call's message must begin within the headers timeout", async (t) => {
  const { url } = await fakeGrpc(t, { headersMs: 300 });
  const session = http2.connect(url);
  t.teardown(() => session.destroy());
  const stream = modelInferStream(session); // headers, then nothing
  const started = performance.now();
  const code = await new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1)));
  const ms = performance.now() - started;
  t.equal(code, http2.constants.NGHTTP2_CANCEL, 'reset with CANCEL');
  t.ok(ms >= 250 && ms < 5000, `after ${Math.round(ms)} ms, not the 10 s body timeout`);
});

t.test(
  'typed contents count against the budget as read: a UINT8 image in uint_contents a byte an element',
  async (t) => {
    // 4 MiB: 8 tiles of 224 px (1.2 MB) fit, raw or in uint_contents; read as 32-bit values (one
    // past 255), 4.8 MB, they do not.
    const { client } = await fakeGrpc(t, { budget: 4 << 20 });
    const stub = client();
    const infer = (request: Json): Promise<number> =>
      new Promise((resolve) =>
        stub.ModelInfer(request, (err: grpc.ServiceError | null) => resolve(err ? err.code : 0)),
      );
    const pixels = Buffer.alloc(8 * 224 * 224 * 3, 5);
    const input = { name: 'image', datatype: 'UINT8', shape: [8, 224, 224, 3] };
    t.equal(
      await infer({ model_name: 'tile-embed', inputs: [input], raw_input_contents: [pixels] }),
      0,
      'raw: answered',
    );
    const typed = (values: number[]) => ({
      model_name: 'tile-embed',
      inputs: [{ ...input, contents: { uint_contents: values } }],
    });
    t.equal(await infer(typed(Array.from(pixels))), 0, 'typed: answered');
    const wide = Array.from(pixels);
    wide[0] = 256;
    t.equal(await infer(typed(wide)), grpc.status.UNAVAILABLE, 'typed past a byte: front busy');
  },
);

t.test(
  'a call whose header list is past MAX_HEADER_LIST is reset, its client acknowledging SETTINGS or not',
  async (t) => {
    const { port } = await fakeGrpc(t, {});
    // One 4,000-byte field entered in the table, then named by index 9 more times: 40 KB decoded
    // from a block of about 4 KB.
    const bomb = Buffer.concat([
      callHeaders(SERVER_LIVE),
      literal('x-b', 'b'.repeat(4000), true),
      ...Array(9).fill(indexed(62)),
    ]);
    const small = callHeaders(SERVER_LIVE);
    const call = (stream: number, block: Buffer) =>
      Buffer.concat([
        frame(FRAME.HEADERS, FLAG.END_HEADERS, stream, block),
        frame(FRAME.DATA, FLAG.END_STREAM, stream, Buffer.alloc(5)),
      ]);
    for (const acknowledged of [false, true]) {
      const { socket, frames } = await rawConnection(port);
      t.teardown(() => socket.destroy());
      if (acknowledged) socket.write(frame(FRAME.SETTINGS, FLAG.ACK, 0));
      socket.write(Buffer.concat([call(1, bomb), call(3, small)]));
      await waitFor(() => frames.some((f) => f.stream === 3 && f.type === FRAME.HEADERS), 5000);
      const reset = frames.find((f) => f.type === FRAME.RST_STREAM && f.stream === 1);
      t.equal(
        reset?.payload.readUInt32BE(0),
        http2.constants.NGHTTP2_ENHANCE_YOUR_CALM,
        `acknowledged ${acknowledged}: reset`,
      );
      t.notOk(
        frames.some((f) => f.stream === 1 && f.type === FRAME.HEADERS),
        'and not answered',
      );
      t.ok(
        frames.some((f) => f.stream === 3 && f.type === FRAME.HEADERS),
        'the next call on the connection is',
      );
    }
  },
);

t.test(
  'calls reset for their header list, before the client acknowledges, whatever grpc-js makes of them',
  async (t) => {
    // grpc-js answers a wrong content type, or a path it does not serve, at once: on a stream
    // already reset, Node would throw in the front.
    const { port, client } = await fakeGrpc(t, {});
    const block = (path: string, type: string) =>
      Buffer.concat([
        literal(':method', 'POST'),
        literal(':scheme', 'http'),
        literal(':path', path),
        literal(':authority', 'x'),
        literal('content-type', type),
        literal('x-b', 'b'.repeat(4000), true),
        ...Array(9).fill(indexed(62)),
      ]);
    const { socket, frames } = await rawConnection(port);
    t.teardown(() => socket.destroy());
    socket.write(
      Buffer.concat([
        frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 1, block(SERVER_LIVE, 'text/plain')),
        frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 3, block('/no.Such/Call', 'application/grpc')),
      ]),
    );
    await waitFor(() => frames.filter((f) => f.stream === 1 || f.stream === 3).length >= 2, 5000);
    const stub = client();
    const live = await new Promise((resolve) =>
      stub.ServerLive({}, (err: grpc.ServiceError | null, r: unknown) => resolve(err ? err.code : r)),
    );
    t.same(live, { live: true }, 'the front answers on');
  },
);

t.test("a client that does not acknowledge the server's SETTINGS is let go of after the headers timeout", async (t) => {
  const { port, client } = await fakeGrpc(t, { headersMs: 300 });
  const [silent, acknowledging] = [await rawConnection(port), await rawConnection(port)];
  t.teardown(() => [silent, acknowledging].forEach((c) => c.socket.destroy()));
  acknowledging.socket.write(frame(FRAME.SETTINGS, FLAG.ACK, 0));
  await waitFor(silent.closed, 5000);
  const goaway = silent.frames.find((f) => f.type === FRAME.GOAWAY);
  t.equal(goaway?.payload.readUInt32BE(4), http2.constants.NGHTTP2_SETTINGS_TIMEOUT, 'GOAWAY SETTINGS_TIMEOUT');
  t.ok(silent.closed(), 'closed');
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.notOk(acknowledging.closed(), 'one that acknowledged stays');
  // One that sends GOAWAY instead, keeping its half of the connection open: its session is gone
  // before the deadline, which must not act on it.
  const leaving = await rawConnection(port, { allowHalfOpen: true });
  t.teardown(() => leaving.socket.destroy());
  leaving.socket.write(frame(FRAME.GOAWAY, 0, 0, Buffer.alloc(8)));
  await new Promise((resolve) => setTimeout(resolve, 600));
  const stub = client();
  const live = await new Promise((resolve) =>
    stub.ServerLive({}, (err: grpc.ServiceError | null, r: unknown) => resolve(err ? err.code : r)),
  );
  t.same(live, { live: true }, 'past its deadline, the front answers on');
});

t.test('a message of more entries than a request may hold is INVALID_ARGUMENT before it is decoded', async (t) => {
  const { url } = await fakeGrpc(t, {});
  const session = http2.connect(url);
  t.teardown(() => session.destroy());
  // 200,000 empty inputs (field 5, length 0), behind a model name.
  const message = Buffer.concat([Buffer.from([0x0a, 10, ...Buffer.from('tile-embed')]), Buffer.alloc(400_000)]);
  for (let i = 12; i < message.length; i += 2) message[i] = 0x2a;
  const stream = modelInferStream(session);
  let status: Record<string, unknown> = {};
  stream.on('response', (headers) => (status = { ...status, ...headers }));
  stream.on('trailers', (trailers) => (status = { ...status, ...trailers }));
  stream.resume();
  stream.end(framed(message));
  await new Promise((resolve) => stream.once('close', resolve));
  t.equal(status['grpc-status'], String(grpc.status.INVALID_ARGUMENT));
  t.equal(decodeURIComponent(String(status['grpc-message'])), "the request's inputs: more than 64 entries");
});

t.test('gRPC errors: a long name clipped in the status, typed contents in the wrong field named', async (t) => {
  const { client } = await fakeGrpc(t, {});
  const stub = client();
  const call = (method: string, request: object) =>
    new Promise<grpc.ServiceError | null>((resolve) =>
      stub[method](request, (err: grpc.ServiceError | null) => resolve(err)),
    );
  // Quoted whole, a long name made trailers past the client's bound: INTERNAL or CANCELLED. (A
  // control call's message is bounded, CALL_BYTES: its name is shorter.)
  const name = 'x'.repeat(100_000);
  const short = name.slice(0, 15_000);
  for (const [method, request] of [
    ['ModelMetadata', { name: short }],
    ['ModelReady', { name: short }],
    ['ModelInfer', { model_name: name, inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 224, 224, 3] }] }],
  ] as const) {
    const err = await call(method, request);
    t.equal(err?.code, grpc.status.NOT_FOUND, method);
    t.ok(err!.details.length < MAX_DETAILS + 100, `${method}: ${err!.details.length} characters`);
    t.match(err!.details, /\.\.\. \(\d+ more characters\)$/);
  }
  const infer = (datatype: string, contents: object) =>
    call('ModelInfer', {
      model_name: 'tile-embed',
      inputs: [{ name: 'image', datatype, shape: [1, 224, 224, 3], contents }],
    });
  const wrong = await infer('UINT8', { int_contents: Array(224 * 224 * 3).fill(1) });
  t.equal(wrong?.code, grpc.status.INVALID_ARGUMENT);
  t.equal(
    wrong?.details,
    "input 'image' (UINT8) has data in int_contents, expected its elements in uint_contents (or raw_input_contents)",
  );
});
