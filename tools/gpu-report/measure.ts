// One model on one execution provider: the service started with that provider alone (one worker
// per GPU), its workers' warm-up, its answers against the cpu provider's on the same tiles, its
// throughput at each concurrency on the raw-body route, GPU memory and pinning per worker, then
// ONNX Runtime alone on that provider at each batch (the floor, in a child process).
import { join } from 'node:path';
import { readPackage } from '../../src/model-package/model-package.js';
import { withQuery } from '../../src/client/tile-body.js';
import { queryGpuProcesses, type GpuInfo } from '../../src/gpu/nvidia-smi.js';
import { drive, type BenchBody, type LoadResult } from '../../bench/load.js';
import type { Floor } from '../../bench/floor.js';
import { spawnService, type ServiceProcess } from '../service-process.js';
import { probe, within, type Outcome } from './deadline.js';
import { reportTiles } from './tiles.js';

export interface Plan {
  model: string;
  provider: string;
  /** The model's settings in the shipped configuration. */
  settings: Record<string, unknown>;
  modelDir: string;
  gpus: GpuInfo[];
  concurrencies: number[];
  seconds: number;
  floorSeconds: number;
  tiles: number;
  env: Record<string, string>;
  /** models[].max_batch for the service (the floor tries up to it too); null: the package's. */
  maxBatch: number | null;
  /** Milliseconds this measurement may take in all. */
  budgetMs: number;
}

export interface WorkerRow {
  id: string;
  gpu: string | null;
  pid: number | null;
  adapter: string | null;
  gpu_memory_mib: number | null;
  /** The GPUs nvidia-smi shows the worker's process on; pinned: only its own. */
  on_gpus: string[] | null;
  pinned: boolean | null;
}

export interface Row {
  model: string;
  provider: string;
  /** ok: measured; failed: the provider cannot run the model here (reason); partial: some steps failed (steps). */
  status: 'ok' | 'failed' | 'partial';
  reason: string | null;
  workers: WorkerRow[];
  warmup_ms: { batch: number; ms: number }[];
  accuracy: { tiles: number; max_abs_diff: number; differing_values: number; values: number } | null;
  load: (LoadResult & { over_floor: number | null })[];
  floor: { best: Floor | null; tried: Floor[] };
  /** Steps that failed, with their reasons. */
  steps: { step: string; reason: string }[];
}

type Json = Record<string, any>;
/** The numbers of an answer (output, embedding), flattened, in a stable order. */
export type Answer = number[];

const numbers = (answer: Json): Answer =>
  ['output', 'embedding'].flatMap((k) =>
    Array.isArray(answer[k]) ? (answer[k] as unknown[]).flat(3).filter((v): v is number => typeof v === 'number') : [],
  );

function stop(service: ServiceProcess): Promise<unknown> {
  service.proc.kill('SIGTERM');
  const kill = setTimeout(() => service.proc.kill('SIGKILL'), 20000);
  return service.exited.finally(() => clearTimeout(kill));
}

/** Batches the floor tries: powers of two up to the model's largest, and that. */
const floorBatches = (max: number) => [
  ...new Set([...Array.from({ length: Math.floor(Math.log2(max)) + 1 }, (_, i) => 2 ** i), max]),
];

export async function measure(plan: Plan, reference: Answer[] | null): Promise<{ row: Row; answers: Answer[] | null }> {
  const deadline = Date.now() + plan.budgetMs;
  const left = (cap: number) => Math.round(Math.max(1000, Math.min(cap, deadline - Date.now())));
  const row: Row = {
    model: plan.model,
    provider: plan.provider,
    status: 'ok',
    reason: null,
    workers: [],
    warmup_ms: [],
    accuracy: null,
    load: [],
    floor: { best: null, tried: [] },
    steps: [],
  };
  const failed = (step: string, outcome: { reason: string }) => row.steps.push({ step, reason: outcome.reason });
  const pkg = readPackage(plan.modelDir);
  const { raw } = reportTiles(pkg.manifest, plan.tiles);
  const cpu = plan.provider === 'cpu';
  // One worker per GPU for a GPU provider; the shipped instances on the cpu.
  const model = {
    ...plan.settings,
    name: plan.model,
    path: plan.modelDir,
    provider: [plan.provider],
    gpus: cpu ? [] : plan.gpus.map((g) => g.index),
    instances: cpu ? (plan.settings.instances ?? 1) : Math.max(1, plan.gpus.length),
    ...(plan.maxBatch ? { max_batch: plan.maxBatch } : {}),
    // Room for the highest concurrency: a full queue would answer 503, which measures nothing.
    max_queue: Math.max(Number(plan.settings.max_queue ?? 64), 2 * Math.max(...plan.concurrencies)),
    request_timeout_ms: 120000,
  };
  let service: ServiceProcess | null = null;
  let answers: Answer[] | null = null;
  const started = await within(
    left(180000),
    'starting the service',
    async () =>
      (service = await spawnService(
        { models: [model], supervisor: { load_timeout_ms: Math.round(left(300000)), drain_delay_ms: 0 } },
        { env: plan.env },
      )),
    () => service?.proc.kill('SIGKILL'),
  );
  if (!started.ok) return { row: { ...row, status: 'failed', reason: started.reason }, answers };
  const svc = started.value;
  try {
    const get = async (path: string) =>
      (await fetch(svc.url + path, { signal: AbortSignal.timeout(10000) })).json() as Promise<Json>;
    // Ready, or failed with the reason (a provider that cannot run fails the model at once).
    const ready = await within(left(300000), 'loading and warm-up', async () => {
      for (;;) {
        const m = ((await get('/api/models').catch(() => ({ models: [] }))).models as Json[]).find(
          (x) => x.name === plan.model,
        );
        if (m?.state === 'ready' || m?.state === 'failed') return m;
        await new Promise((r) => setTimeout(r, 250));
      }
    });
    if (!ready.ok) return { row: { ...row, status: 'failed', reason: ready.reason }, answers };
    if (ready.value.state === 'failed')
      return { row: { ...row, status: 'failed', reason: ready.value.reason ?? 'failed to load' }, answers };
    const info = ready.value;
    const workers = info.workers as Json[];
    const shapes = new Map<number, number>();
    for (const w of workers)
      for (const s of (w.warmup?.shapes ?? []) as { batch: number; ms: number }[])
        shapes.set(s.batch, Math.max(shapes.get(s.batch) ?? 0, s.ms));
    row.warmup_ms = [...shapes].map(([batch, ms]) => ({ batch, ms }));
    const path = (info.endpoints as string[]).find((e) => e.startsWith('POST '))!.slice(5);

    // The same tiles as the cpu provider's, one at a time: a tile's answer does not depend on its batch.
    const asked = await within(left(120000), 'answers on the report tiles', async () => {
      const out: Answer[] = [];
      for (const body of raw as Extract<BenchBody, { query: string }>[]) {
        const response = await fetch(svc.url + withQuery(path, body.query), {
          method: 'POST',
          headers: { 'content-type': body.type },
          body: body.body,
          signal: AbortSignal.timeout(110000),
        });
        if (response.status !== 200)
          throw new Error(`${path}: ${response.status} ${(await response.text()).slice(0, 200)}`);
        out.push(numbers((await response.json()) as Json));
      }
      return out;
    });
    if (asked.ok) {
      answers = asked.value;
      if (reference) {
        let max = 0;
        let differing = 0;
        let values = 0;
        answers.forEach((a, i) =>
          a.forEach((v, k) => {
            const d = Math.abs(v - reference[i][k]);
            max = Math.max(max, d);
            differing += d > 0 ? 1 : 0;
            values++;
          }),
        );
        row.accuracy = { tiles: answers.length, max_abs_diff: max, differing_values: differing, values };
      }
    } else failed('answers', asked);

    for (const c of plan.concurrencies) {
      const run: Outcome<LoadResult> = await within(left(plan.seconds * 1000 * 2 + 90000), `load at c=${c}`, () =>
        drive(svc.url, plan.model, path, raw, c, { seconds: plan.seconds }),
      );
      if (!run.ok) failed(`c=${c}`, run);
      else if (run.value.tilesPerSec === 0)
        failed(`c=${c}`, {
          reason: `no tile answered within the ${plan.seconds} s run (${run.value.errors} errors): longer --seconds`,
        });
      else row.load.push({ ...run.value, over_floor: null });
    }

    // GPU memory per worker after the load, and on which GPUs each worker's process holds it.
    // The supervisor probes each worker within 2.5 s: a worker still busy may miss it, so up to 3 tries.
    const diagnosed = await within(left(30000), 'worker GPU memory', async () => {
      let payload: Json = {};
      for (let i = 0; i < 3 && !Array.isArray(payload.workers); i++) payload = await get('/diagnostics');
      return [payload, await queryGpuProcesses(10000).catch(() => null)] as const;
    });
    // The section is {"error": ...} when the supervisor's probe of it timed out.
    const section: unknown = diagnosed.ok ? diagnosed.value[0].workers : null;
    const diag = Array.isArray(section) ? (section as Json[]) : [];
    const processes = diagnosed.ok ? diagnosed.value[1] : null;
    if (!diagnosed.ok) failed('gpu memory', diagnosed);
    else if (!Array.isArray(section))
      failed('gpu memory', { reason: `/diagnostics workers: ${JSON.stringify(section).slice(0, 200)}` });
    row.workers = workers.map((w) => {
      const d = diag.find((x) => x.id === w.id);
      const pid = (d?.pid as number | undefined) ?? null;
      const uuid = plan.gpus.find((g) => g.index === w.gpu)?.uuid;
      const on =
        processes && pid !== null ? [...new Set(processes.filter((p) => p.pid === pid).map((p) => p.gpu_uuid))] : null;
      return {
        id: w.id,
        gpu: w.gpu,
        pid,
        adapter: w.adapter ? `${w.adapter.name}${w.adapter.software ? ' (software)' : ''}` : null,
        gpu_memory_mib: (d?.gpu_memory_mib as number | undefined) ?? null,
        on_gpus: on,
        pinned: on && uuid && on.length ? on.length === 1 && on[0] === uuid : null,
      };
    });
  } finally {
    await stop(svc);
  }

  // The floor, with the service stopped: the provider alone in one process, each batch size.
  const gpu = plan.gpus[0];
  const env = {
    ...plan.env,
    ...(cpu
      ? { CUDA_VISIBLE_DEVICES: '' }
      : gpu
        ? { CUDA_VISIBLE_DEVICES: gpu.index, CUDA_DEVICE_ORDER: 'PCI_BUS_ID' }
        : {}),
  };
  const batches = floorBatches(Math.min(pkg.manifest.batch.max, plan.maxBatch ?? Infinity));
  const floor = await probe(
    ['floor', plan.modelDir, plan.provider, String(plan.floorSeconds), ...batches.map(String)],
    env,
    left(batches.length * (plan.floorSeconds * 1000 + 60000)),
  );
  row.floor.tried = floor.lines as Floor[];
  row.floor.best = row.floor.tried.reduce<Floor | null>(
    (best, f) => (!best || f.tilesPerSec > best.tilesPerSec ? f : best),
    null,
  );
  if (floor.error)
    failed(`floor (after batch ${row.floor.tried.map((f) => f.batch).join(', ') || 'none'})`, { reason: floor.error });
  for (const l of row.load) l.over_floor = row.floor.best ? l.tilesPerSec / row.floor.best.tilesPerSec : null;
  if (row.steps.length) row.status = 'partial';
  return { row, answers };
}

export const modelDir = (repository: string, settings: { name: string; path?: string }) =>
  join(repository, settings.path ?? settings.name);
