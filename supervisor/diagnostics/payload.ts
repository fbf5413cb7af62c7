// The /diagnostics payload: every probe, from the supervisor and from each worker over IPC, in one
// anonymized body that is safe to paste into a bug report. Built where the workers are owned (the
// supervisor); fronts only relay it.
import { dirname } from 'node:path';
import pidusage from 'pidusage';
import type { ModelView } from '../../src/ipc/protocol.js';
import type { UsageLog } from '../usage-log.js';
import { Anonymizer } from './anonymize.js';
import { gpuMemory } from './gpu-memory.js';
import * as probes from './probes.js';

/** A worker instance as diagnostics sees it. */
export interface DiagnosedWorker {
  id: string;
  pid: number | null;
  tail: readonly string[];
  snapshot(): Record<string, unknown>;
  probe(timeoutMs: number): Promise<Record<string, unknown>>;
}

export interface DiagnosticsSource {
  models(): ModelView[];
  workers(): DiagnosedWorker[];
  usage: UsageLog;
  /** Slide names of recent requests, memory only, scrubbed from every text. */
  recentSlides: Set<string>;
}

export interface DiagnosticsOptions {
  probeTimeoutMs: number;
  logFile: string | null;
  /** Folders whose free space is reported and whose paths are scrubbed. */
  folders: Record<string, string>;
  installPaths: string[];
}

export function diagnostics(source: DiagnosticsSource, options: DiagnosticsOptions) {
  const anonymizer = new Anonymizer({
    installPaths: [...options.installPaths, ...(options.logFile ? [dirname(options.logFile)] : [])],
    slideNames: () => source.recentSlides,
    // Model names are data, never scrubbed as secrets or slides.
    publicNames: source.models().map((m) => m.name),
  });
  const timeout = options.probeTimeoutMs;

  const models = () =>
    Object.fromEntries(
      source.models().map((m) => [
        m.name,
        {
          state: m.state,
          reason: m.reason,
          instances: m.instances.length,
          ready_instances: m.instances.filter((i) => i.state === 'ready').length,
          sha256: m.info?.sha256 ?? null,
          trained: m.info?.manifest.provenance.trained ?? null,
        },
      ]),
    );

  /** Each worker: the supervisor's view, pidusage's CPU and memory, and its own IPC probe. */
  const workers = async () => {
    // In parallel with the workers' own probes, within the probe timeout (a hung nvidia-smi).
    const gpuQuery = gpuMemory(timeout);
    return Promise.all(
      source.workers().map(async (w) => {
        const usage = w.pid
          ? await pidusage(w.pid).then(
              (u) => ({ cpu_pct: u.cpu, memory_bytes: u.memory }),
              (err: Error) => ({ error: err.message }),
            )
          : null;
        const probe = await w.probe(timeout);
        const gpuUsed = await gpuQuery;
        // Present only with nvidia-smi: a worker without a CUDA context holds 0.
        const gpu = gpuUsed && w.pid !== null ? { gpu_memory_mib: gpuUsed.get(w.pid) ?? 0 } : {};
        return { ...w.snapshot(), usage, ...gpu, probe };
      }),
    );
  };

  async function full() {
    const [versions, host, gpus, disk, modelStates, workerStates, serviceLog] = await Promise.all([
      probes.runProbe(probes.versions, timeout),
      probes.runProbe(probes.host, timeout),
      probes.runProbe(probes.gpus, timeout),
      probes.runProbe(() => probes.disk(options.folders), timeout),
      probes.runProbe(models, timeout),
      // Worker probes carry their own timeout; the section's is a little longer.
      probes.runProbe(workers, timeout + 500),
      probes.runProbe(() => probes.tail(options.logFile), timeout),
    ]);
    return {
      generated_at: new Date().toISOString(),
      versions,
      host,
      gpus,
      disk,
      models: modelStates,
      workers: workerStates,
      logs: {
        service: serviceLog,
        // Worker output is part of the server log; empty when no log file is configured.
        workers: options.logFile ? Object.fromEntries(source.workers().map((w) => [w.id, w.tail.slice(-50)])) : {},
      },
      usage_summary: await probes.runProbe(() => source.usage.summary(), timeout),
    };
  }

  /** No categories: the full payload at the top level; otherwise the categories asked for. */
  return async (categories: string[]): Promise<unknown> => {
    if (categories.length === 0) return anonymizer.scrub(await full());
    const body: Record<string, unknown> = {};
    if (categories.includes('diagnostics')) body.diagnostics = await full();
    if (categories.includes('usage')) body.usage = source.usage.recent();
    return anonymizer.scrub(body);
  };
}
