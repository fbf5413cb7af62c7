// `bin/gpu-report` (in the kit from `npm run build:slim -- --bench`) or `npm run gpu:report`:
// one command that says whether a host's GPUs work for this service and how fast, in at most ten
// minutes (--budget). Prints a Markdown table and writes the same as JSON (--out, default
// gpu-report-<host>-<date>.json in the working directory, and .md beside it).
//   --models=a,b      the shipped models to measure (default: every one in config/default.json)
//   --providers=...   of cpu, webgpu, cuda (default: all three; cpu is always measured first, as
//                     the baseline the others' answers are compared with)
//   --concurrency=16,64  --seconds=5 (per load run)  --floor-seconds=2 (per floor batch)
//   --tiles=8 (compared with cpu)  --budget=570 (seconds, for the whole report)
//   --max-batch=N     caps models[].max_batch (a software Vulkan device runs a big batch for minutes)
// Every step has a deadline; a failing step is a row (or a note in its row) with its reason, and
// the report is written whatever failed.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, hostname, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { queryGpus } from '../../src/gpu/nvidia-smi.js';
import { bundledVersion, checkCudaProvider, runtimeDir } from '../../src/gpu/cuda-provider.js';
import { deviceLabel, type VulkanDevice } from '../../src/gpu/vulkan.js';
import { ROOT } from '../service-process.js';
import { probe, within } from './deadline.js';
import { measure, modelDir, type Answer, type Row } from './measure.js';
import { findNvidiaIcd, GLVND_HINT } from './vulkan-icd.js';
import { markdown, type Host, type Report } from './markdown.js';

/** The options; an unknown one is an error message and exit status 2, with the usage. */
const parseOptions = () =>
  parseArgs({
    options: {
      models: { type: 'string' },
      providers: { type: 'string', default: 'cpu,webgpu,cuda' },
      concurrency: { type: 'string', default: '16,64' },
      seconds: { type: 'string', default: '5' },
      'floor-seconds': { type: 'string', default: '2' },
      tiles: { type: 'string', default: '8' },
      budget: { type: 'string', default: '570' },
      'max-batch': { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean' },
    },
  }).values;
const USAGE = `Usage: gpu-report [--models=a,b] [--providers=cpu,webgpu,cuda] [--concurrency=16,64] [--seconds=5]
                  [--floor-seconds=2] [--tiles=8] [--max-batch=N] [--budget=570] [--out=FILE.json]
Measures this host's GPUs for the service (docs/gpu.md) within --budget seconds: prints a Markdown
table and writes it as JSON (FILE.json, default gpu-report-<host>-<date>.json here) and Markdown.
`;
const PROVIDERS = ['cpu', 'webgpu', 'cuda'];
const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
const positive = (name: string, s: string) => {
  const n = Number(s);
  if (!(n > 0)) throw new Error(`--${name} is "${s}", expected a positive number`);
  return n;
};

async function main(): Promise<number> {
  const values = parseOptions();
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const started = Date.now();
  const budgetMs = positive('budget', values.budget!) * 1000;
  const left = () => budgetMs - (Date.now() - started);
  const config = JSON.parse(readFileSync(join(ROOT, 'config/default.json'), 'utf8')) as {
    model_repository: string;
    models: { name: string; path?: string }[];
  };
  const shipped = config.models.map((m) => m.name);
  const models = values.models ? list(values.models) : shipped;
  const unknown = models.filter((m) => !shipped.includes(m));
  if (unknown.length)
    throw new Error(`--models: ${unknown.join(', ')} not among the shipped models (${shipped.join(', ')})`);
  const providers = list(values.providers!);
  const bad = providers.filter((p) => !PROVIDERS.includes(p));
  if (bad.length) throw new Error(`--providers: ${bad.join(', ')}: expected some of ${PROVIDERS.join(', ')}`);
  const order = ['cpu', ...providers.filter((p) => p !== 'cpu')];
  const settings = {
    models,
    providers: order,
    concurrencies: list(values.concurrency!).map((c) => positive('concurrency', c)),
    seconds: positive('seconds', values.seconds!),
    floor_seconds: positive('floor-seconds', values['floor-seconds']!),
    tiles: positive('tiles', values.tiles!),
    budget_s: budgetMs / 1000,
    max_batch: values['max-batch'] ? positive('max-batch', values['max-batch']) : null,
  };

  // The host: GPUs, Vulkan's ICD and devices, the CUDA provider's libraries.
  const gpus = await within(15000, 'nvidia-smi', () => queryGpus(10000));
  const icd = findNvidiaIcd();
  const vulkan = await probe(['vulkan'], icd.env, 30000);
  const devices = vulkan.error ? null : (vulkan.lines[0] as VulkanDevice[] | null);
  const version = bundledVersion(runtimeDir());
  const cuda = checkCudaProvider(runtimeDir(), version);
  const host: Host = {
    machine: `${hostname()}: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.versions.node}`,
    onnxruntime: version,
    gpus: gpus.ok ? gpus.value : null,
    gpus_note: !gpus.ok ? gpus.reason : gpus.value === null ? 'no nvidia-smi' : `${gpus.value.length} GPU(s)`,
    vulkan_icd: icd.note,
    vulkan_loader: (process.env.LD_LIBRARY_PATH ?? '')
      .split(':')
      .some((d) => d.endsWith('/lib') && d.startsWith(ROOT.replace(/\/$/, '')))
      ? "the kit's lib/libvulkan.so.1 first, then the system's"
      : "the system's",
    vulkan: devices,
    vulkan_note: vulkan.error
      ? `the Vulkan probe failed: ${vulkan.error}`
      : devices === null
        ? 'no Vulkan loader (libvulkan.so.1)'
        : devices.length
          ? devices.map(deviceLabel).join('; ')
          : icd.manifest
            ? `no Vulkan device, though NVIDIA's ICD is there: ${GLVND_HINT}`
            : 'no Vulkan device',
    cuda:
      cuda.state === 'ok'
        ? `provider libraries for ONNX Runtime ${version}`
        : cuda.state === 'absent'
          ? 'provider libraries not installed (npm run cuda:install, or build:slim --cuda FILE)'
          : cuda.problem,
  };
  process.stderr.write(`host: ${host.gpus_note}; Vulkan: ${host.vulkan_note}; cuda: ${host.cuda}\n`);

  // Each model on each provider, cpu first: its answers are the reference.
  const rows: Row[] = [];
  const repository = resolve(ROOT, config.model_repository);
  const pairs = models.flatMap((m) => order.map((p) => [m, p] as const));
  for (const [i, [model, provider]] of pairs.entries()) {
    const share = Math.round(left() / (pairs.length - i));
    const empty = { workers: [], warmup_ms: [], accuracy: null, load: [], floor: { best: null, tried: [] }, steps: [] };
    if (share < 5000) {
      rows.push({
        model,
        provider,
        status: 'failed',
        reason: `not run: the report's ${settings.budget_s} s budget was spent`,
        ...empty,
      });
      continue;
    }
    const entry = config.models.find((m) => m.name === model)!;
    const reference = provider === 'cpu' ? null : (cpuAnswers.get(model) ?? null);
    process.stderr.write(`${model} on ${provider} (up to ${Math.round(share / 1000)} s)\n`);
    const measured = await within(share + 30000, `${model} on ${provider}`, () =>
      measure(
        {
          model,
          provider,
          settings: entry,
          modelDir: modelDir(repository, entry),
          gpus: host.gpus ?? [],
          concurrencies: settings.concurrencies,
          seconds: settings.seconds,
          floorSeconds: settings.floor_seconds,
          tiles: settings.tiles,
          maxBatch: settings.max_batch,
          env: icd.env,
          budgetMs: share,
        },
        reference,
      ),
    );
    if (!measured.ok) rows.push({ model, provider, status: 'failed', reason: measured.reason, ...empty });
    else {
      rows.push(measured.value.row);
      if (provider === 'cpu' && measured.value.answers) cpuAnswers.set(model, measured.value.answers);
    }
  }

  const report: Report = { date: new Date().toISOString(), host, settings, rows };
  const out = resolve(values.out ?? `gpu-report-${hostname()}-${report.date.slice(0, 10)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  const md = markdown(report);
  writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
  writeFileSync(out.replace(/\.json$/, '') + '.md', md);
  process.stdout.write(md);
  process.stderr.write(`written: ${out} (${Math.round((Date.now() - started) / 1000)} s)\n`);
  return 0;
}

const cpuAnswers = new Map<string, Answer[]>();

try {
  process.exitCode = await main();
} catch (err) {
  process.stderr.write(`gpu-report: ${(err as Error).message}\n${USAGE}`);
  process.exitCode = 2;
}
