// The Open Inference Protocol's section of `npm run bench`: tiles/s and CPU per tile (the load
// generator's, the fronts', the workers') at c=16 for v2 JSON, v2 binary at batches of 1, 8 and 32, and gRPC at 1 and 32, against
// the contract's raw-body route (application/octet-stream, one tile per request), on one service
// serving a null model (bench/null-models.ts, batch.max raised to 32), each system taking its turn,
// a number of rounds, so that each ratio compares runs of one round, seconds apart.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import { join } from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import { spawnService, waitFor } from '../tools/service-process.js';
import { cellularTile, rgbOf } from '../tools/synthetic/tissue.js';
import { LOADER_OPTIONS, PROTO_FILE } from '../src/front/v2/grpc-server.js';
import { cpuByRole } from './cpu.js';
import { errorCount, fire, warmUp, type BenchBody, type Span } from './load.js';
import { writeNullPackages } from './null-models.js';
import { median } from './stats.js';

export interface V2Row {
  /** raw-body route, v2 JSON, v2 binary, gRPC. */
  system: string;
  /** Each round measures every system in turn; ratios compare rows of one round. */
  round: number;
  batch: number;
  concurrency: number;
  tilesPerSec: number;
  errors: number;
  /** CPU ms per tile: the load generator (this process), the fronts, the workers. */
  clientCpuMsPerTile: number;
  frontCpuMsPerTile: number;
  workerCpuMsPerTile: number;
}

const SIZE = 224;
const MODEL = 'null-224';
const BATCHES = [1, 8, 32];

function rgbTiles(count: number): Buffer[] {
  return Array.from({ length: count }, (_, i) => rgbOf(cellularTile(1000 + i)));
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

type Load = () => Promise<{ ok: number; errors: number; seconds: number }>;

/** Runs `load` and measures tiles/s and CPU per tile around it. */
async function measure(
  system: string,
  batch: number,
  concurrency: number,
  pid: number,
  load: Load,
): Promise<Omit<V2Row, 'round'>> {
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
    workerCpuMsPerTile: perTile(after.workers - before.workers),
  };
  console.log(
    `v2 section: ${system} batch ${batch} c=${concurrency}: ${row.tilesPerSec.toFixed(0)} tiles/s, errors ${errors}, client CPU ms/tile ${row.clientCpuMsPerTile.toFixed(3)}, front ${row.frontCpuMsPerTile.toFixed(3)}, workers ${row.workerCpuMsPerTile.toFixed(3)}`,
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
  const options = { headers, building: 'prebuilt' } as const;
  await fire(url, path, bodies, concurrency, warmUp(span), options);
  return async () => {
    const result = await fire(url, path, bodies, concurrency, span, options);
    return {
      ok: result.requests.total - result.non2xx,
      errors: errorCount(result),
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
  // A session error (the service gone while the session closes: ECONNRESET) fails the calls still
  // open, each closing without a grpc-status and counted as an error; unheard, it ends the bench.
  session.on('error', () => {});
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
    /** Resolves once the connection is closed, so that the service stops after it. */
    close: () => new Promise<void>((resolve) => session.close(resolve)),
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

/** Every system in turn, `rounds` times on one service (after one warm-up each). */
export async function benchV2(options: {
  span: Span;
  concurrency: number;
  smoke: boolean;
  rounds: number;
}): Promise<V2Row[]> {
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
  let channel: ReturnType<typeof grpcClientFor> | undefined;
  try {
    await waitFor(async () => (await fetch(`${service.url}/health/ready`)).status === 200, 120000);
    const client = grpcClientFor(grpcPort);
    channel = client;
    const tiles = rgbTiles(options.smoke ? 32 : 64);
    const batches = (n: number) =>
      Array.from({ length: Math.max(1, tiles.length / n) }, (_, i) => tiles.slice(i * n, i * n + n));
    const query = `slide_name=bench&x=0&y=0&width=${SIZE}&height=${SIZE}&patch_idx=0`;
    const systems: { system: string; batch: number; load: Load }[] = [
      {
        system: 'raw-body route',
        batch: 1,
        load: await http(
          service.url,
          `/api/predict/${MODEL}`,
          tiles.map((body) => ({ type: 'application/octet-stream', body, query })),
          concurrency,
          span,
        ),
      },
      {
        system: 'v2 JSON',
        batch: 1,
        load: await http(service.url, `/v2/models/${MODEL}/infer`, tiles.slice(0, 8).map(jsonBody), concurrency, span),
      },
    ];
    for (const n of BATCHES) {
      const bodies = batches(n).map(binaryBody);
      const load = await http(
        service.url,
        `/v2/models/${MODEL}/infer`,
        bodies.map(({ body }) => ({ type: 'application/octet-stream', body, query: '' })),
        concurrency,
        span,
        { 'inference-header-content-length': String(bodies[0].headerLength) },
      );
      systems.push({ system: 'v2 binary', batch: n, load });
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
      systems.push({ system: 'gRPC', batch: n, load: grpcLoad(client, requests, concurrency, span) });
    }
    const rows: V2Row[] = [];
    for (let round = 1; round <= (options.smoke ? 1 : options.rounds); round++)
      for (const { system, batch, load } of systems)
        rows.push({ round, ...(await measure(system, batch, concurrency, pid, load)) });
    return rows;
  } finally {
    await channel?.close();
    service.proc.kill('SIGTERM');
    await service.exited;
    rmSync(models, { recursive: true, force: true });
  }
}

/** A row per system: its tiles/s in each round, its ratios to the raw-body route (and gRPC's to v2
 *  binary at the same batch) in each round with their median, and median CPU figures. */
export function v2Markdown(rows: V2Row[]): string {
  const f = (n: number, d = 0) => n.toFixed(d);
  const find = (round: number, system: string, batch: number) =>
    rows.find((r) => r.round === round && r.system === system && r.batch === batch);
  const ratios = (of: V2Row[], to: (r: V2Row) => V2Row | undefined) => {
    const xs = of.flatMap((r) => {
      const base = to(r);
      return base?.tilesPerSec ? [r.tilesPerSec / base.tilesPerSec] : [];
    });
    return xs.length ? `${xs.map((x) => f(x, 2)).join(' / ')} (median ${f(median(xs), 2)})` : '';
  };
  const groups = new Map<string, V2Row[]>();
  for (const r of rows) {
    const key = `${r.system}|${r.batch}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  const rounds = Math.max(0, ...rows.map((r) => r.round));
  return [
    `Open Inference Protocol: a null model (${SIZE} px, 2 instances), c=${rows[0]?.concurrency}, one front, ${rounds} round(s) of every system in turn; tiles/s against the contract's raw-body route (one application/octet-stream tile per request) in the same round.`,
    '',
    '| system | tiles/request | tiles/s, each round | of raw-body route | of v2 binary, same batch | errors | client CPU ms/tile | front CPU ms/tile | workers CPU ms/tile |',
    '|---|---|---|---|---|---|---|---|---|',
    ...[...groups.values()].map((of) => {
      const { system, batch } = of[0];
      return `| ${system} | ${batch} | ${of.map((r) => f(r.tilesPerSec)).join(' / ')} | ${ratios(of, (r) => find(r.round, 'raw-body route', 1))} | ${system === 'gRPC' ? ratios(of, (r) => find(r.round, 'v2 binary', batch)) : ''} | ${of.reduce((n, r) => n + r.errors, 0)} | ${f(median(of.map((r) => r.clientCpuMsPerTile)), 3)} | ${f(median(of.map((r) => r.frontCpuMsPerTile)), 3)} | ${f(median(of.map((r) => r.workerCpuMsPerTile)), 3)} |`;
    }),
  ].join('\n');
}
