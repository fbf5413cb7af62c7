// The report as Markdown: the host, then one row per model and provider.
import type { GpuInfo } from '../../src/gpu/nvidia-smi.js';
import type { VulkanDevice } from '../../src/gpu/vulkan.js';
import type { Row } from './measure.js';

export interface Host {
  machine: string;
  onnxruntime: string;
  gpus: GpuInfo[] | null;
  gpus_note: string;
  vulkan_icd: string;
  vulkan_loader: string;
  vulkan: VulkanDevice[] | null;
  vulkan_note: string;
  cuda: string;
}

export interface Report {
  date: string;
  host: Host;
  settings: {
    models: string[];
    providers: string[];
    concurrencies: number[];
    seconds: number;
    floor_seconds: number;
    tiles: number;
    budget_s: number;
    max_batch: number | null;
  };
  rows: Row[];
}

/** "503: 6395, socket: 2" */
const kinds = (k: Record<string, number> | undefined) =>
  Object.entries(k ?? {})
    .map(([kind, n]) => `${kind}: ${n}`)
    .join(', ');
const f = (n: number | null | undefined, d = 1) => (n === null || n === undefined ? '–' : n.toFixed(d));
const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

function note(r: Row): string {
  if (r.status === 'failed') return r.reason ?? 'failed';
  return r.steps.map((s) => `${s.step}: ${s.reason}`).join('; ');
}

export function markdown(report: Report): string {
  const { host, settings } = report;
  const cs = settings.concurrencies;
  const gpus = host.gpus?.length
    ? host.gpus.map((g) => `GPU ${g.index}: ${g.name}, ${g.memory_total_mib} MiB, driver ${g.driver}`).join('; ')
    : host.gpus_note;
  const lines = [
    `# GPU report ${report.date}`,
    '',
    `- Machine: ${host.machine}; ONNX Runtime ${host.onnxruntime}`,
    `- GPUs (nvidia-smi): ${gpus}`,
    `- Vulkan: ${host.vulkan_note} (loader: ${host.vulkan_loader}; ${host.vulkan_icd})`,
    `- CUDA provider: ${host.cuda}`,
    `- Load: raw-body route (uint8 RGB), ${settings.seconds} s per concurrency after a warm-up; floor: ONNX Runtime alone in one process, best of batches, ${settings.floor_seconds} s each; max |diff| against cpu on ${settings.tiles} tiles.`,
    '',
    `| model | provider | status | workers (GPU: device) | warm-up ms per batch | max \\|diff\\| vs cpu | ${cs.map((c) => `c=${c} tiles/s (p50/p99 ms)`).join(' | ')} | floor tiles/s (batch) | ${cs.map((c) => `c=${c}/floor`).join(' | ')} | GPU MiB per worker | note |`,
    `|${Array(9 + 2 * cs.length)
      .fill('---')
      .join('|')}|`,
  ];
  for (const r of report.rows) {
    const workers = r.workers
      .map(
        (w) =>
          `${w.gpu ?? 'cpu'}${w.adapter ? `: ${w.adapter}` : ''}${w.pinned === false ? ` (NOT pinned: on ${w.on_gpus?.join(', ')})` : w.pinned ? ' (pinned)' : ''}`,
      )
      .join(', ');
    const warm = r.warmup_ms.map((w) => `${w.batch}: ${w.ms}`).join(', ');
    const diff = r.accuracy
      ? `${r.accuracy.max_abs_diff.toExponential(1)} (${r.accuracy.differing_values}/${r.accuracy.values} differ)`
      : '–';
    const load = cs.map((c) => {
      const l = r.load.find((x) => x.concurrency === c);
      return l ? `${f(l.tilesPerSec)} (${l.p50}/${l.p99})${l.errors ? `, errors ${kinds(l.errorKinds)}` : ''}` : '–';
    });
    const ratio = cs.map((c) => f(r.load.find((x) => x.concurrency === c)?.over_floor, 2));
    const floor = r.floor.best ? `${f(r.floor.best.tilesPerSec)} (${r.floor.best.batch})` : '–';
    const memory = r.workers.some((w) => w.gpu_memory_mib !== null)
      ? r.workers.map((w) => w.gpu_memory_mib ?? '–').join(', ')
      : '–';
    lines.push(
      `| ${r.model} | ${r.provider} | ${r.status} | ${cell(workers || '–')} | ${warm || '–'} | ${diff} | ${load.join(' | ')} | ${floor} | ${ratio.join(' | ')} | ${memory} | ${cell(note(r))} |`,
    );
  }
  // Where a tile's time went at the highest concurrency: the service's own stage metrics.
  lines.push('');
  for (const r of report.rows) {
    const l = r.load.find((x) => x.concurrency === Math.max(...cs));
    const stages = Object.entries(l?.stages ?? {}).filter(([, ms]) => ms > 0);
    if (l && stages.length)
      lines.push(
        `- ${r.model} on ${r.provider}, c=${l.concurrency}, mean batch ${f(l.meanBatch)}: ms per tile ${stages.map(([s, ms]) => `${s} ${f(ms, 2)}`).join(', ')}`,
      );
  }
  // Which providers each model could use, and why not the others.
  lines.push('');
  for (const model of settings.models) {
    const rows = report.rows.filter((r) => r.model === model);
    const usable = rows
      .filter((r) => r.status !== 'failed')
      .map(
        (r) =>
          r.provider +
          (r.workers.some((w) => w.adapter?.endsWith('(software)'))
            ? ' (software device: "auto" would not use it)'
            : ''),
      );
    const not = rows.filter((r) => r.status === 'failed').map((r) => `${r.provider}: ${r.reason}`);
    lines.push(
      `- ${model}: ${usable.length ? usable.join(', ') : 'no provider'}${not.length ? `; not ${not.join('; ')}` : ''}`,
    );
  }
  return lines.join('\n') + '\n';
}
