// `node dist/bench/fronts.js [--model=tile-embed] [--connections=32] [--max-queue=64] [--fronts=4]
// [--seconds=4] [--runs=3] [--baseline=DIR]`: keep-alive connections to a model served by several
// fronts, which take connections as the kernel hands them out (unevenly). Reports tiles/s and the
// errors by kind per run; with --baseline (another built checkout) the two alternate, run by run.
// Measured this way: a fixed share of max_queue per front refused thousands of requests with the
// queue far from full (docs/operations.md, "Queues").
import { parseArgs } from 'node:util';
import { endpointsFor } from '../src/contract/endpoints.js';
import { readPackage } from '../src/model-package/model-package.js';
import { spawnService, waitFor, ROOT } from '../tools/service-process.js';
import { reportTiles } from '../tools/gpu-report/tiles.js';
import { drive } from './load.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'tile-embed' },
    connections: { type: 'string', default: '32' },
    'max-queue': { type: 'string', default: '64' },
    fronts: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '4' },
    runs: { type: 'string', default: '3' },
    baseline: { type: 'string' },
  },
});
const model = values.model!;
const dir = `${ROOT}/models/${model}`;
const { manifest } = readPackage(dir);
const { raw } = reportTiles(manifest, 8);
const path = endpointsFor(model, manifest.tasks)[0].slice('POST '.length);

async function once(root: string) {
  const service = await spawnService(
    {
      fronts: Number(values.fronts),
      models: [{ name: model, path: dir, instances: 1, max_queue: Number(values['max-queue']) }],
      supervisor: { drain_delay_ms: 0 },
    },
    { root },
  );
  try {
    await waitFor(async () => (await fetch(`${service.url}/health/ready`)).ok, 120000);
    const r = await drive(service.url, model, path, raw, Number(values.connections), {
      seconds: Number(values.seconds),
    });
    return `${r.tilesPerSec.toFixed(1)} tiles/s, p50 ${r.p50} ms, errors ${JSON.stringify(r.errorKinds)} (in the warm-up before it ${JSON.stringify(r.warmUpErrorKinds)})`;
  } finally {
    service.proc.kill('SIGTERM');
    await service.exited;
  }
}

console.log(
  `${model}: ${values.connections} connections, ${values.fronts} fronts, max_queue ${values['max-queue']}, ${values.seconds} s per run`,
);
for (let run = 1; run <= Number(values.runs); run++)
  for (const [name, root] of [['this checkout', ROOT], ...(values.baseline ? [['baseline', values.baseline]] : [])])
    console.log(`run ${run}, ${name}: ${await once(root)}`);
