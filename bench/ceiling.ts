// The service's own ceiling: null models (bench/null-models.ts) served at 224 and 512 px, against
// the irreducible-work server (bench/irreducible-server.ts), in one run on one machine, with the
// CPU each process role spends per tile. Optionally the same for another checkout (--baseline=DIR,
// e.g. the previous main), so "before" and "after" come from the same run. The systems take turns
// at each size and concurrency, so a ratio compares runs that are seconds apart.
import { fork } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { spawnService, waitFor, ROOT } from '../tools/service-process.js';
import { encodePng, cellularTile, slideTile } from '../tools/synthetic/tissue.js';
import { cpuByRole, cpuOfTree, type Role } from './cpu.js';
import { fire, warmUp, type Span } from './load.js';
import { writeNullPackages } from './null-models.js';

export interface CeilingRow {
  system: string;
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

function bodiesFor(size: 224 | 512, count: number): string[] {
  return Array.from({ length: count }, (_, i) => {
    const png = encodePng(size === 224 ? cellularTile(1000 + i) : slideTile({ size: 512, seed: 2000 + i, stain: 'he', tissue: 0.5, pale: 0.4, fat: 0.2, dust: 20 }));
    return JSON.stringify({ image_data: png.toString('base64'), slide_name: 'bench-slide', x: i * size, y: 0, width: size, height: size, patch_idx: i, resolution: 0.5 });
  });
}

/** A server under measurement: the irreducible one or a service, with how to read its CPU. */
interface System {
  name: string;
  url: string;
  path: (size: 224 | 512) => string;
  cpu: () => Record<string, number>;
  stop: () => Promise<void>;
}

/** A fresh process compiles for seconds (V8 optimizes what gets hot): each server is first
 *  driven for a while at every size, so its runs measure a server that has settled. */
async function settle(system: System, bodies: Record<number, string[]>, span: Span): Promise<void> {
  if (!('seconds' in span)) return;
  for (const size of SIZES) await fire(system.url, system.path(size), bodies[size], 16, { seconds: Math.min(5, span.seconds) });
}

/** Drives `path` and measures tiles/s and CPU per tile, `cpu()` read around the run. */
async function measure(url: string, path: string, bodies: string[], c: number, span: Span, cpu: () => Record<string, number>) {
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
  return { tilesPerSec: ok / seconds, p50: result.latency.p50, p99: result.latency.p99, errors: result.errors + result.non2xx + result.timeouts, cpuMsPerTile };
}

async function startService(name: string, root: string, fronts: number, models: string): Promise<System> {
  const service = await spawnService(
    { fronts, model_repository: models, models: SIZES.map((size) => ({ name: `null-${size}`, instances: 2, gpus: [], intra_op_threads: 1, max_queue: 256 })), supervisor: { drain_delay_ms: 0 } },
    { root },
  );
  const pid = service.proc.pid!;
  const system: System = {
    name,
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
  const server = fork(join(ROOT, 'dist/bench/irreducible-server.js'), [String(port)], { execArgv: [], stdio: 'ignore' });
  const exited = new Promise((resolve) => server.once('exit', resolve));
  const url = `http://127.0.0.1:${port}`;
  const system: System = {
    name: 'irreducible',
    url,
    path: () => '/',
    cpu: () => ({ server: cpuOfTree(server.pid!) }),
    stop: async () => {
      server.kill('SIGTERM');
      await exited;
    },
  };
  return started(system, async () => (await fetch(url, { method: 'POST', body: bodiesFor(224, 1)[0] })).status === 200, 30000);
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

/** Every system is started and settled first; then, for each size and concurrency, each system
 *  runs in turn, so a ratio compares runs minutes apart at most: on a shared host the machine's
 *  share changes between the start and the end of a run of this length. */
export async function measureCeiling(options: CeilingOptions): Promise<CeilingRow[]> {
  const models = writeNullPackages();
  const count = options.smoke ? 4 : 32;
  const bodies = { 224: bodiesFor(224, count), 512: bodiesFor(512, options.smoke ? 4 : 16) };
  const systems: System[] = [];
  try {
    systems.push(await startIrreducible());
    if (options.baselineRoot) systems.push(await startService('baseline', options.baselineRoot, 1, models));
    for (const fronts of options.fronts) systems.push(await startService(`service fronts=${fronts}`, ROOT, fronts, models));
    for (const system of systems) await settle(system, bodies, options.span);
    const rows: CeilingRow[] = [];
    for (const size of SIZES) {
      for (const c of options.concurrencies) {
        for (const system of systems) {
          const r = await measure(system.url, system.path(size), bodies[size], c, options.span, system.cpu);
          rows.push({ system: system.name, size, concurrency: c, ...r });
          console.log(`${system.name} ${size}px c=${c}: ${r.tilesPerSec.toFixed(0)} tiles/s, errors ${r.errors}, CPU ms/tile ${JSON.stringify(r.cpuMsPerTile, (_, v) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v))}`);
        }
      }
    }
    return rows;
  } finally {
    for (const system of systems) await system.stop();
  }
}

/** Markdown table: each service row with its ratio to the irreducible server at the same size and
 *  concurrency. */
export function ceilingMarkdown(rows: CeilingRow[]): string {
  const floor = (r: CeilingRow) => rows.find((x) => x.system === 'irreducible' && x.size === r.size && x.concurrency === r.concurrency)!;
  const f = (n: number | undefined, d = 2) => (n === undefined ? '' : n.toFixed(d));
  const cpu = (r: CeilingRow) => r.cpuMsPerTile;
  return [
    `Service ceiling: null models (Cast + ReduceMean), 2 instances each, on ${availableParallelism()} cores; irreducible = read, JSON.parse, base64, native inflate, small JSON answer, one process per core.`,
    '',
    '| system | tile | conc. | tiles/s | of irreducible | p50 ms | p99 ms | errors | CPU ms/tile: front(s) | supervisor | workers | load gen. |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) =>
      r.system === 'irreducible'
        ? `| irreducible | ${r.size} | ${r.concurrency} | ${f(r.tilesPerSec, 0)} | 1.00 | ${r.p50} | ${r.p99} | ${r.errors} | ${f(cpu(r).server)} (server) | | | ${f(cpu(r).load)} |`
        : `| ${r.system} | ${r.size} | ${r.concurrency} | ${f(r.tilesPerSec, 0)} | ${f(r.tilesPerSec / floor(r).tilesPerSec)} | ${r.p50} | ${r.p99} | ${r.errors} | ${f(cpu(r).fronts)} | ${f(cpu(r).supervisor)} | ${f(cpu(r).workers)} | ${f(cpu(r).load)} |`,
    ),
    '',
    'For a checkout without fronts (the baseline), HTTP is served by the supervisor: its CPU is under "supervisor".',
  ].join('\n');
}
