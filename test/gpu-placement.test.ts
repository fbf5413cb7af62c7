// GPU pinning with fake GPUs: the environment and execution provider each worker reports.
import t from 'tap';
import { assignGpus } from '../supervisor/gpus.js';
import { RestartPolicy } from '../supervisor/restart-policy.js';
import { startServer } from './helpers/server.js';
import { fakeNvidiaSmi } from './helpers/packages.js';

const entry = (name: string, instances: number, gpus: 'auto' | string[]) => ({ name, instances, gpus, max_queue_delay_ms: 2, max_queue: 64, request_timeout_ms: 1000 });

t.test('assignGpus: explicit lists per model, auto round-robin across models, CPU without GPUs', async (t) => {
  const plan = assignGpus([entry('a', 3, 'auto'), entry('b', 2, ['7']), entry('c', 2, 'auto'), entry('d', 1, [])], ['0', '1']);
  t.same(Object.fromEntries(plan), { a: ['0', '1', '0'], b: ['7', '7'], c: ['1', '0'], d: [null] });
  t.same(Object.fromEntries(assignGpus([entry('a', 2, 'auto')], [])), { a: [null, null] });
});

t.test('restart backoff doubles to a cap and resets after a long run', async (t) => {
  const policy = new RestartPolicy({ initialDelayMs: 100, maxDelayMs: 1000, resetAfterMs: 60000 });
  t.same([0, 0, 0, 0, 0, 0].map(() => policy.nextDelay(10)), [100, 200, 400, 800, 1000, 1000]);
  t.equal(policy.nextDelay(60000), 100, 'a worker that stayed up a minute starts over');
  t.equal(policy.nextDelay(5), 200);
});

t.test('workers are pinned with CUDA_VISIBLE_DEVICES and fall back to CPU with a warning', async (t) => {
  const bin = fakeNvidiaSmi(['0, NVIDIA H100 80GB HBM3, 81559, 1024, 3, 550.54.15', '1, NVIDIA H100 80GB HBM3, 81559, 2048, 7, 550.54.15']);
  const server = await startServer({
    models: [{ name: 'gene-expr', instances: 2, gpus: 'auto' }, { name: 'tile-embed', gpus: ['5'] }, { name: 'tissue-seg', gpus: [] }],
    env: { PATH: `${bin}:${process.env.PATH}` },
  });
  t.teardown(() => server.stop());
  await server.allWorkersReady();
  const diag = (await (await server.get('/diagnostics')).json()) as Record<string, any>;
  const byId = Object.fromEntries(diag.workers.map((w: Record<string, any>) => [w.id, w]));
  t.match(byId['gene-expr#0'], { gpu: '0', cuda_visible_devices: '0', provider: 'cpu', provider_warning: /GPU 0 assigned but the CUDA execution provider is unavailable .*; running on CPU/ });
  t.match(byId['gene-expr#1'], { gpu: '1', cuda_visible_devices: '1', provider: 'cpu' });
  t.match(byId['tile-embed#0'], { gpu: '5', cuda_visible_devices: '5', provider: 'cpu', provider_warning: /GPU 5/ });
  t.match(byId['tissue-seg#0'], { gpu: null, cuda_visible_devices: '', provider: 'cpu', provider_warning: null });
  t.match(diag.gpus, [{ index: '0', name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, driver: '550.54.15' }, { index: '1' }]);
  t.ok(diag.logs.service.some((l: string) => l.includes('CUDA execution provider is unavailable')), 'the warning is in the log');
});
