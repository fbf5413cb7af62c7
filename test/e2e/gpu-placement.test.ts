// GPU placement and execution providers with fake GPUs (nvidia-smi on PATH): the pinning each
// worker gets, the provider it chose and why it passed over the others, the GPU memory nvidia-smi
// reports per worker, and a provider list that cannot work failing its model at once.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { fakeNvidiaSmi } from '../helpers/packages.js';

type Json = Record<string, any>;

t.test('workers are pinned, fall back to cpu saying why, and report their GPU memory', async (t) => {
  // GPU 1 has a MIG device (nvidia-smi -L lists it; the GPU query lists whole GPUs only).
  const mig = 'MIG-0e6b6e4c-7d3a-5b8e-9f10-2a3b4c5d6e7f';
  const bin = fakeNvidiaSmi(
    [
      '0, NVIDIA H100 80GB HBM3, GPU-5c2e7a41-9d0b-3f4e-8b7a-1f2e3d4c5b6a, 00000000:18:00.0, 81559, 1024, 3, 550.54.15',
      '1, NVIDIA H100 80GB HBM3, GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90, 00000000:3B:00.0, 81559, 2048, 7, 550.54.15',
    ],
    1234,
    { 1: [mig] },
  );
  const server = await startServer({
    models: [
      { name: 'gene-expr', instances: 2, gpus: 'auto' },
      { name: 'tile-embed', instances: 2, gpus: ['5', mig] },
      { name: 'tissue-seg', gpus: [] },
    ],
    env: { PATH: `${bin}:${process.env.PATH}` },
  });
  t.teardown(() => server.stop());
  await server.allWorkersReady();
  const diag = (await (await server.get('/diagnostics')).json()) as Json;
  const byId = Object.fromEntries(diag.workers.map((w: Json) => [w.id, w]));
  const notInstalled = { provider: 'cuda', reason: /CUDA provider libraries are not installed/ };
  // This machine's Vulkan devices (none, or a software rasterizer) do not include the fake GPU.
  t.match(byId['gene-expr#0'], {
    gpu: '0',
    cuda_visible_devices: '0',
    provider: 'cpu',
    provider_skipped: [
      notInstalled,
      { provider: 'webgpu', reason: /GPU 0 \(pci 0000:18:00\.0\) is not among the Vulkan devices|no Vulkan loader/ },
    ],
    gpu_memory_mib: 1234,
  });
  t.match(byId['gene-expr#1'], {
    gpu: '1',
    cuda_visible_devices: '1',
    provider: 'cpu',
    provider_skipped: [notInstalled, { provider: 'webgpu', reason: /GPU 1 \(pci 0000:3b:00\.0\)|no Vulkan loader/ }],
  });
  t.match(byId['tile-embed#0'], {
    gpu: '5',
    cuda_visible_devices: '5',
    provider: 'cpu',
    provider_skipped: [notInstalled, { provider: 'webgpu', reason: /only software Vulkan devices|no Vulkan/ }],
  });
  t.match(byId['tile-embed#1'], {
    gpu: mig,
    cuda_visible_devices: mig,
    provider: 'cpu',
    provider_skipped: [
      notInstalled,
      {
        provider: 'webgpu',
        reason: `${mig} is a MIG device, which Vulkan (and so webgpu) cannot use: only cuda runs on it`,
      },
    ],
  });
  t.ok(
    diag.logs.service.some((l: string) => l.includes('gpus[0] is \\"5\\", not a GPU of this host')),
    'a GPU nvidia-smi does not list is warned of',
  );
  t.notOk(
    diag.logs.service.some((l: string) => l.includes(mig) && l.includes('not a')),
    'a MIG device nvidia-smi -L lists is not',
  );
  t.match(byId['tissue-seg#0'], {
    gpu: null,
    cuda_visible_devices: '',
    provider: 'cpu',
    provider_skipped: [
      { provider: 'cuda', reason: /no GPU assigned/ },
      { provider: 'webgpu', reason: /no GPU assigned/ },
    ],
  });
  t.match(diag.gpus, [
    {
      index: '0',
      name: 'NVIDIA H100 80GB HBM3',
      uuid: /^GPU-5c2e/,
      pci_bus_id: '00000000:18:00.0',
      memory_total_mib: 81559,
      driver: '550.54.15',
    },
    { index: '1' },
  ]);
  t.ok(
    diag.logs.service.some((l: string) => l.includes('provider cuda passed over')),
    'the reasons are in the log',
  );

  const { models } = (await (await server.get('/api/models')).json()) as Json;
  const geneExpr = models.find((m: Json) => m.name === 'gene-expr');
  t.match(geneExpr.workers[0], {
    id: 'gene-expr#0',
    gpu: '0',
    provider: 'cpu',
    provider_skipped: [notInstalled, { provider: 'webgpu' }],
    load_ms: Number,
    warmup: { batch_shapes: Array, shapes: [{ batch: 1, ms: Number }] },
  });

  const metrics = await (await server.get('/metrics')).text();
  t.match(metrics, /worker_gpu_memory_bytes\{model="gene-expr",instance="0"\} 1293942784/, 'nvidia-smi MiB as bytes');
  t.match(metrics, /worker_gpu_memory_bytes\{model="tissue-seg",instance="0"\} 1293942784/);
});

t.test('without nvidia-smi there is no GPU memory to report, and none is', async (t) => {
  const server = await startServer({ models: [{ name: 'tissue-seg', gpus: [] }], env: { PATH: '/usr/bin:/bin' } });
  t.teardown(() => server.stop());
  const diag = (await (await server.get('/diagnostics')).json()) as Json;
  t.notOk('gpu_memory_mib' in diag.workers[0], 'absent, not 0');
  t.equal(diag.gpus, 'none');
  t.notMatch(await (await server.get('/metrics')).text(), /worker_gpu_memory_bytes\{/);
});

t.test('a provider list none of whose providers works fails its model at once; the others serve', async (t) => {
  const started = Date.now();
  const server = await startServer({
    models: [
      { name: 'gene-expr', gpus: [], provider: ['cuda'] },
      { name: 'tissue-seg', gpus: [], provider: ['cuda', 'cpu'] },
    ],
    config: { health: { strict_readiness: false } },
  });
  t.teardown(() => server.stop());
  await server.waitFor(
    async () => ((await (await server.get('/api/models')).json()) as Json).models[0].state === 'failed',
  );
  const { models } = (await (await server.get('/api/models')).json()) as Json;
  t.match(models[0], {
    name: 'gene-expr',
    state: 'failed',
    reason: /no usable execution provider in \["cuda"\]: cuda: no GPU assigned/,
  });
  t.ok(models[0].workers[0].restarts <= 1, 'failed, not restarted in a loop');
  t.match(models[1], {
    name: 'tissue-seg',
    state: 'ready',
    workers: [{ provider: 'cpu', provider_skipped: [{ provider: 'cuda', reason: /no GPU assigned/ }] }],
  });
  t.ok(Date.now() - started < 60000, `settled in ${Date.now() - started} ms`);
  const answer = await server.post('/api/predict/gene-expr', {});
  t.equal(answer.status, 503);
  t.match(await answer.json(), {
    detail: /model gene-expr failed to load: .*no usable execution provider in \["cuda"\]/,
  });
});
