// GPU pinning with fake GPUs: the environment and execution provider each worker reports.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { fakeNvidiaSmi } from '../helpers/packages.js';

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
