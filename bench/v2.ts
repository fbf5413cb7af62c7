// The Open Inference Protocol's section of `npm run bench`: tiles/s and the load generator's CPU
// per tile at c=16 for v2 JSON, v2 binary at batches of 1, 8 and 32, and gRPC at 1 and 32, against
// the contract's raw-body route (application/octet-stream, one tile per request), in one run on
// one service serving a null model (bench/null-models.ts, batch.max raised to 32), each system
// taking its turn so that ratios compare runs seconds apart.
import { readFileSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import { join } from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import { spawnService, waitFor } from '../tools/service-process.js';
import { cellularTile } from '../tools/synthetic/tissue.js';
import { LOADER_OPTIONS, PROTO_FILE } from '../src/front/v2/grpc-server.js';
import { cpuByRole } from './cpu.js';
import { fire, warmUp, type BenchBody, type Span } from './load.js';
import { writeNullPackages } from './null-models.js';

export interface V2Row {
  /** raw-body route, v2 JSON, v2 binary, gRPC. */
  system: string;
  batch: number;
  concurrency: number;
  tilesPerSec: number;
  errors: number;
  /** CPU ms per tile: the load generator (this process), the fronts, the workers. */
  clientCpuMsPerTile: number;
  frontCpuMsPerTile: number;
}

const SIZE = 224;
const MODEL = 'null-224';
const BATCHES = [1, 8, 32];

function rgbTiles(count: number): Buffer[] {
  return Array.from({ length: count }, (_, i) => {
    const tile = cellularTile(1000 + i);
    const rgb = Buffer.alloc(SIZE * SIZE * 3);
    for (let p = 0; p < SIZE * SIZE; p++) tile.rgba.copy(rgb, p * 3, p * 4, p * 4 + 3);
    return rgb;
  });
}

/** A v2 binary request of `tiles` and its JSON header's length. */
function binaryBody(tiles: Buffer[]): { body: Buffer; headerLength: number } {
  const data = Buffer.concat(tiles);
  const header = Buffer.from(
    JSON.stringify({
      parameters: { binary_data_output: true },
      inputs: [
        {
          name: 'image',
          datatype: 'UINT8',
          shape: [tiles.length, SIZE, SIZE, 3],
          parameters: { binary_data_size: data.length },
        },
      ],
    }),
  );
  return { body: Buffer.concat([header, data]), headerLength: header.length };
}

const jsonBody = (tile: Buffer): string =>
  JSON.stringify({ inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, SIZE, SIZE, 3], data: Array.from(tile) }] });

/** Runs `load` after a warm-up and measures tiles/s and CPU per tile around it. */
async function measure(
  system: string,
  batch: number,
  concurrency: number,
  pid: number,
  load: () => Promise<{ ok: number; errors: number; seconds: number }>,
): Promise<V2Row> {
  const before = cpuByRole(pid);
  const client0 = process.cpuUsage();
  const { ok, errors, seconds } = await load();
  const client = process.cpuUsage(client0);
  const after = cpuByRole(pid);
  const tiles = ok * batch;
  const perTile = (ms: number) => (tiles ? ms / tiles : 0);
  const row = {
    system,
    batch,
    concurrency,
    tilesPerSec: tiles / seconds,
    errors,
    clientCpuMsPerTile: perTile((client.user + client.system) / 1000),
    frontCpuMsPerTile: perTile(after.fronts - before.fronts),
  };
  console.log(
    `v2 section: ${system} batch ${batch} c=${concurrency}: ${row.tilesPerSec.toFixed(0)} tiles/s, errors ${errors}, client CPU ms/tile ${row.clientCpuMsPerTile.toFixed(3)}, front ${row.frontCpuMsPerTile.toFixed(3)}`,
  );
  return row;
}

/** autocannon over keep-alive HTTP, its requests built once, as the gRPC calls are framed once. */
async function http(
  url: string,
  path: string,
  bodies: BenchBody[],
  concurrency: number,
  span: Span,
  headers: Record<string, string> = {},
) {
  await fire(url, path, bodies, concurrency, warmUp(span), headers, 'prebuilt');
  return async () => {
    const result = await fire(url, path, bodies, concurrency, span, headers, 'prebuilt');
    return {
      ok: result.requests.total - result.non2xx,
      errors: result.errors + result.non2xx + result.timeouts,
      seconds: result.duration,
    };
  };
}

/** ModelInfer as autocannon sends HTTP: each request a gRPC message framed once beforehand (its
 *  5-byte prefix, then the protobuf), written as it is on one HTTP/2 connection, and its answer
 *  judged by its grpc-status, not decoded. A grpc-js client copies each 4.8 MB message into a new
 *  frame per call, CPU that would count against the server on these shared cores; the framing is
 *  gRPC's own (PROTOCOL-HTTP2.md), and the messages come from the proto's encoder. */
function grpcClientFor(port: number) {
  const service = protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS)[
    'inference.GRPCInferenceService'
  ] as protoLoader.ServiceDefinition;
  const method = service.ModelInfer as protoLoader.MethodDefinition<object, object>;
  // Unbounded as grpc-js's own client session: 16 calls of 4.8 MB are more than http2's 10 MB default.
  const session = http2.connect(`http://127.0.0.1:${port}`, { maxSessionMemory: Number.MAX_SAFE_INTEGER });
  return {
    encode(request: object): Buffer {
      const message = method.requestSerialize(request);
      const framed = Buffer.alloc(5 + message.length);
      framed.writeUInt32BE(message.length, 1);
      message.copy(framed, 5);
      return framed;
    },
    infer(framed: Buffer, done: (err: Error | null) => void): void {
      const call = session.request({
        ':method': 'POST',
        ':path': method.path,
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      let status: unknown;
      // grpc-status comes in the trailers, or in the headers of a trailers-only answer.
      call.on('response', (headers) => (status ??= headers['grpc-status']));
      call.on('trailers', (trailers) => (status = trailers['grpc-status']));
      call.on('close', () => done(status === '0' ? null : new Error(`grpc-status ${status}`)));
      call.resume();
      call.end(framed);
    },
    close: () => session.close(),
  };
}

/** `concurrency` calls in flight on one channel, for the span. */
function grpcLoad(client: ReturnType<typeof grpcClientFor>, requests: Buffer[], concurrency: number, span: Span) {
  return async () => {
    const started = performance.now();
    const until = 'seconds' in span ? started + span.seconds * 1000 : Infinity;
    let ok = 0;
    let errors = 0;
    let next = 0;
    const worker = async (count: number) => {
      for (let i = 0; i < count && performance.now() < until; i++) {
        await new Promise<void>((resolve) =>
          client.infer(requests[next++ % requests.length], (err) => (err ? errors++ : ok++, resolve())),
        );
      }
    };
    await Promise.all(
      Array.from({ length: concurrency }, () => worker('perConnection' in span ? span.perConnection : Infinity)),
    );
    return { ok, errors, seconds: (performance.now() - started) / 1000 };
  };
}

export async function benchV2(options: { span: Span; concurrency: number; smoke: boolean }): Promise<V2Row[]> {
  const { concurrency } = options;
  // The smoke run only has to work: a request per connection and row.
  const span: Span = options.smoke ? { perConnection: 1 } : options.span;
  const models = writeNullPackages();
  const manifestFile = join(models, MODEL, 'manifest.json');
  writeFileSync(
    manifestFile,
    JSON.stringify({ ...JSON.parse(readFileSync(manifestFile, 'utf8')), batch: { max: 32 } }),
  );
  const grpcPort = 19900 + Math.floor(Math.random() * 90);
  const service = await spawnService({
    fronts: 1,
    model_repository: models,
    grpc_port: grpcPort,
    // A v2 batch takes a queue place per tile: c=16 batches of 32 hold 512 tiles, which the
    // queue bound must admit for the section to measure throughput rather than refusals.
    models: [{ name: MODEL, instances: 2, gpus: [], intra_op_threads: 1, max_queue: 1024 }],
    supervisor: { drain_delay_ms: 0 },
  });
  const pid = service.proc.pid!;
  const client = grpcClientFor(grpcPort);
  try {
    await waitFor(async () => (await fetch(`${service.url}/health/ready`)).status === 200, 120000);
    const tiles = rgbTiles(options.smoke ? 32 : 64);
    const batches = (n: number) =>
      Array.from({ length: Math.max(1, tiles.length / n) }, (_, i) => tiles.slice(i * n, i * n + n));
    const rows: V2Row[] = [];
    const query = `slide_name=bench&x=0&y=0&width=${SIZE}&height=${SIZE}&patch_idx=0`;
    rows.push(
      await measure(
        'raw-body route',
        1,
        concurrency,
        pid,
        await http(
          service.url,
          `/api/predict/${MODEL}`,
          tiles.map((body) => ({ type: 'application/octet-stream', body, query })),
          concurrency,
          span,
        ),
      ),
    );
    rows.push(
      await measure(
        'v2 JSON',
        1,
        concurrency,
        pid,
        await http(service.url, `/v2/models/${MODEL}/infer`, tiles.slice(0, 8).map(jsonBody), concurrency, span),
      ),
    );
    for (const n of BATCHES) {
      const bodies = batches(n).map(binaryBody);
      const path = `/v2/models/${MODEL}/infer`;
      const load = await http(
        service.url,
        path,
        bodies.map(({ body }) => ({ type: 'application/octet-stream', body, query: '' })),
        concurrency,
        span,
        { 'inference-header-content-length': String(bodies[0].headerLength) },
      );
      rows.push(await measure('v2 binary', n, concurrency, pid, load));
    }
    for (const n of [1, 32]) {
      const requests = batches(n).map((group) =>
        client.encode({
          model_name: MODEL,
          inputs: [{ name: 'image', datatype: 'UINT8', shape: [group.length, SIZE, SIZE, 3] }],
          raw_input_contents: [Buffer.concat(group)],
        }),
      );
      await grpcLoad(client, requests, concurrency, warmUp(span))();
      rows.push(await measure('gRPC', n, concurrency, pid, grpcLoad(client, requests, concurrency, span)));
    }
    return rows;
  } finally {
    client.close();
    service.proc.kill('SIGTERM');
    await service.exited;
  }
}

export function v2Markdown(rows: V2Row[]): string {
  const raw = rows.find((r) => r.system === 'raw-body route');
  const f = (n: number, d = 0) => n.toFixed(d);
  return [
    `Open Inference Protocol: a null model (${SIZE} px, 2 instances), c=${rows[0]?.concurrency}, one front; tiles/s against the contract's raw-body route (one application/octet-stream tile per request) in the same run.`,
    '',
    '| system | tiles/request | tiles/s | of raw-body route | errors | client CPU ms/tile | front CPU ms/tile |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.system} | ${r.batch} | ${f(r.tilesPerSec)} | ${raw ? f(r.tilesPerSec / raw.tilesPerSec, 2) : ''} | ${r.errors} | ${f(r.clientCpuMsPerTile, 3)} | ${f(r.frontCpuMsPerTile, 3)} |`,
    ),
  ].join('\n');
}
