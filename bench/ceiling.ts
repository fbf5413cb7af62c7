// The service's own ceiling: null models (bench/null-models.ts) served at 224 and 512 px, for each
// body type (the contract's JSON, a PNG body, raw RGB pixels), against the irreducible-work server
// (bench/irreducible-server.ts) doing the minimal work of the same body type, in one run on one
// machine, with the CPU each process role spends per tile. Optionally the same for another
// checkout (--baseline=DIR, e.g. the previous main), so "before" and "after" come from the same
// run. The systems take turns at each size, concurrency and body type, so a ratio compares runs
// that are seconds apart.
import { fork } from 'node:child_process';
import { rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { spawnService, waitFor, ROOT } from '../tools/service-process.js';
import { encodePng, cellularTile, rgbOf, slideTile, type SyntheticTile } from '../tools/synthetic/tissue.js';
import { cpuByRole, cpuOfTree, type Role } from './cpu.js';
import { errorCount, fire, warmUp, type BenchBody, type Span } from './load.js';
import { writeNullPackages } from './null-models.js';

/** The request bodies compared: the contract's JSON (base64 PNG), the PNG file, raw uint8 RGB. */
export const BODY_TYPES = ['json', 'png', 'raw'] as const;
export type BodyType = (typeof BODY_TYPES)[number];

export interface CeilingRow {
  system: string;
  body: BodyType;
  size: 224 | 512;
  concurrency: number;
  tilesPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU milliseconds per answered tile, by role; `load` is the load generator (this process). */
  cpuMsPerTile: Partial<Record<Role | 'server' | 'load', number>>;
}

export interface CeilingOptions {
  span: Span;
  concurrencies: number[];
  /** Front counts to run the service with. */
  fronts: number[];
  baselineRoot?: string;
  smoke?: boolean;
}

const SIZES = [224, 512] as const;

/** The same tiles as each body type; a baseline without binary bodies gets JSON only. */
function bodiesFor(size: 224 | 512, count: number): Record<BodyType, BenchBody[]> {
  const bodies: Record<BodyType, BenchBody[]> = { json: [], png: [], raw: [] };
  for (let i = 0; i < count; i++) {
    const tile: SyntheticTile =
      size === 224
        ? cellularTile(1000 + i)
        : slideTile({ size: 512, seed: 2000 + i, stain: 'he', tissue: 0.5, pale: 0.4, fat: 0.2, dust: 20 });
    const png = encodePng(tile);
    const fields = {
      slide_name: 'bench-slide',
      x: i * size,
      y: 0,
      width: size,
      height: size,
      patch_idx: i,
      resolution: 0.5,
    };
    const query = new URLSearchParams(
      Object.entries(fields).map(([k, v]): [string, string] => [k, String(v)]),
    ).toString();
    bodies.json.push(JSON.stringify({ image_data: png.toString('base64'), ...fields }));
    bodies.png.push({ type: 'image/png', body: png, query });
    bodies.raw.push({ type: 'application/octet-stream', body: rgbOf(tile), query });
  }
  return bodies;
}

/** A server under measurement: the irreducible one or a service, with how to read its CPU. */
interface System {
  name: string;
  /** The body types it takes. */
  bodies: readonly BodyType[];
  url: string;
  path: (size: 224 | 512) => string;
  cpu: () => Record<string, number>;
  stop: () => Promise<void>;
}

/** A fresh process compiles for seconds (V8 optimizes what gets hot): each server is first
 *  driven for a while at every size and body type, so its runs measure a server that has settled. */
async function settle(
  system: System,
  bodies: Record<number, Record<BodyType, BenchBody[]>>,
  span: Span,
): Promise<void> {
  if (!('seconds' in span)) return;
  for (const size of SIZES)
    for (const type of system.bodies)
      await fire(system.url, system.path(size), bodies[size][type], 16, { seconds: Math.min(3, span.seconds) });
}

/** Drives `path` and measures tiles/s and CPU per tile, `cpu()` read around the run. */
async function measure(
  url: string,
  path: string,
  bodies: BenchBody[],
  c: number,
  span: Span,
  cpu: () => Record<string, number>,
) {
  await fire(url, path, bodies, c, warmUp(span));
  const before = cpu();
  const load0 = process.cpuUsage();
  const result = await fire(url, path, bodies, c, span);
  const seconds = result.duration;
  const loadUs = process.cpuUsage(load0);
  const after = cpu();
  const ok = result.requests.total - result.non2xx;
  const perTile = (ms: number) => (ok ? ms / ok : 0);
  const cpuMsPerTile: Record<string, number> = { load: perTile((loadUs.user + loadUs.system) / 1000) };
  for (const key of Object.keys(after)) cpuMsPerTile[key] = perTile(after[key] - before[key]);
  return {
    tilesPerSec: ok / seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: errorCount(result),
    cpuMsPerTile,
  };
}

async function startService(
  name: string,
  root: string,
  fronts: number,
  models: string,
  bodies: readonly BodyType[],
): Promise<System> {
  const service = await spawnService(
    {
      fronts,
      model_repository: models,
      models: SIZES.map((size) => ({
        name: `null-${size}`,
        instances: 2,
        gpus: [],
        intra_op_threads: 1,
        max_queue: 256,
      })),
      supervisor: { drain_delay_ms: 0 },
    },
    { root },
  );
  const pid = service.proc.pid!;
  const system: System = {
    name,
    bodies,
    url: service.url,
    path: (size) => `/api/predict/null-${size}`,
    cpu: () => cpuByRole(pid),
    stop: async () => {
      service.proc.kill('SIGTERM');
      await service.exited;
    },
  };
  return started(system, async () => (await fetch(`${service.url}/health/ready`)).status === 200, 120000);
}

async function startIrreducible(): Promise<System> {
  const port = 19000 + Math.floor(Math.random() * 900);
  const server = fork(join(ROOT, 'dist/bench/irreducible-server.js'), [String(port)], {
    execArgv: [],
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => server.once('exit', resolve));
  const url = `http://127.0.0.1:${port}`;
  const system: System = {
    name: 'irreducible',
    bodies: BODY_TYPES,
    url,
    path: () => '/',
    cpu: () => ({ server: cpuOfTree(server.pid!) }),
    stop: async () => {
      server.kill('SIGTERM');
      await exited;
    },
  };
  return started(
    system,
    async () =>
      (
        await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: bodiesFor(224, 1).json[0] as string,
        })
      ).status === 200,
    30000,
  );
}

/** The system once `ready` holds; one that does not come up within `ms` is stopped, then the
 *  error is thrown. */
async function started(system: System, ready: () => Promise<boolean>, ms: number): Promise<System> {
  await waitFor(ready, ms).catch(async (err) => {
    await system.stop();
    throw err;
  });
  return system;
}

/** Every system is started and settled first; then, for each size, concurrency and body type,
 *  each system runs in turn, so a ratio compares runs minutes apart at most: on a shared host the
 *  machine's share changes between the start and the end of a run of this length. The baseline
 *  (another checkout) is sent JSON only. */
export async function measureCeiling(options: CeilingOptions): Promise<CeilingRow[]> {
  const models = writeNullPackages();
  // The smoke run only has to work: one size.
  const sizes = options.smoke ? ([224] as const) : SIZES;
  const bodies = {
    224: bodiesFor(224, options.smoke ? 4 : 32),
    512: options.smoke ? { json: [], png: [], raw: [] } : bodiesFor(512, 16),
  };
  const systems: System[] = [];
  try {
    systems.push(await startIrreducible());
    if (options.baselineRoot) systems.push(await startService('baseline', options.baselineRoot, 1, models, ['json']));
    for (const fronts of options.fronts)
      systems.push(await startService(`service fronts=${fronts}`, ROOT, fronts, models, BODY_TYPES));
    for (const system of systems) await settle(system, bodies, options.span);
    const rows: CeilingRow[] = [];
    for (const size of sizes) {
      for (const c of options.concurrencies) {
        for (const body of BODY_TYPES) {
          for (const system of systems.filter((s) => s.bodies.includes(body))) {
            const r = await measure(system.url, system.path(size), bodies[size][body], c, options.span, system.cpu);
            rows.push({ system: system.name, body, size, concurrency: c, ...r });
            console.log(
              `${system.name} ${body} ${size}px c=${c}: ${r.tilesPerSec.toFixed(0)} tiles/s, errors ${r.errors}, CPU ms/tile ${JSON.stringify(r.cpuMsPerTile, (_, v) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v))}`,
            );
          }
        }
      }
    }
    return rows;
  } finally {
    for (const system of systems) await system.stop();
    rmSync(models, { recursive: true, force: true });
  }
}

/** Markdown table: each row with its ratio to the irreducible server for the same body type,
 *  and each binary row with its ratio to the same system's JSON row, at the same size and
 *  concurrency. */
export function ceilingMarkdown(rows: CeilingRow[]): string {
  const same = (r: CeilingRow, system: string, body: BodyType) =>
    rows.find((x) => x.system === system && x.body === body && x.size === r.size && x.concurrency === r.concurrency);
  const f = (n: number | undefined, d = 2) => (n === undefined ? '' : n.toFixed(d));
  const ratio = (r: CeilingRow, other: CeilingRow | undefined) => (other ? f(r.tilesPerSec / other.tilesPerSec) : '');
  const cpu = (r: CeilingRow) => r.cpuMsPerTile;
  return [
    `Service ceiling: null models (Cast + ReduceMean), 2 instances each, on ${availableParallelism()} cores, for each request body: json (the contract: base64 PNG in JSON), png (the PNG file), raw (uint8 RGB). Irreducible = per body type, read the body and the fields (JSON.parse, or the query), get the pixels (base64 + native inflate, inflate, nothing), small JSON answer; one process per core.`,
    '',
    '| system | body | tile | conc. | tiles/s | of JSON | of irreducible | p50 ms | p99 ms | errors | CPU ms/tile: front(s) | supervisor | workers | load gen. |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const head = `| ${r.system} | ${r.body} | ${r.size} | ${r.concurrency} | ${f(r.tilesPerSec, 0)} | ${r.body === 'json' ? '1.00' : ratio(r, same(r, r.system, 'json'))} | ${ratio(r, same(r, 'irreducible', r.body))} | ${r.p50} | ${r.p99} | ${r.errors}`;
      return r.system === 'irreducible'
        ? `${head} | ${f(cpu(r).server)} (server) | | | ${f(cpu(r).load)} |`
        : `${head} | ${f(cpu(r).fronts)} | ${f(cpu(r).supervisor)} | ${f(cpu(r).workers)} | ${f(cpu(r).load)} |`;
    }),
    '',
    'For a checkout without fronts (the baseline), HTTP is served by the supervisor: its CPU is under "supervisor".',
  ].join('\n');
}
