// The webgpu execution provider without a GPU: onnxruntime-node's bundled WebGPU provider (Dawn)
// on a software Vulkan device (Mesa's lavapipe, which .ci/run installs from bookworm-backports).
// Every shipped model on webgpu answers as on cpu within float tolerance, and a tile's answer on
// webgpu does not depend on its batch. "auto" never picks a software device (gpu-placement
// test); an explicit ["webgpu"] may, which is what this test uses. Slow: lavapipe compiles the
// shaders on the CPU, and runs tens of times slower than the cpu provider.
import t from 'tap';
import { startServer, type TestServer } from '../helpers/server.js';
import { cellularPng, fixturePng, tileRequest } from '../helpers/tiles.js';
import { vulkanDevices } from '../../src/gpu/vulkan.js';

type Json = Record<string, any>;

const devices = vulkanDevices() ?? [];
if (devices.length === 0) {
  // CI installs the device; a developer's machine may not have it.
  if (process.env.CI) t.fail('no Vulkan device: .ci/run installs mesa-vulkan-drivers from bookworm-backports');
  else t.pass('skipped: no Vulkan device here (Debian: mesa-vulkan-drivers from bookworm-backports)');
} else {
  const models = ['tissue-seg', 'gene-expr', 'tile-embed'];
  // A batch of two: the shape every webgpu batch is padded to, compiled at load. Runs take
  // seconds on the software device: a long request deadline.
  const webgpu = await startServer({
    models: models.map((name) => ({ name, gpus: [], provider: ['webgpu'], max_batch: 2, request_timeout_ms: 300000 })),
    config: { supervisor: { load_timeout_ms: 600000 } },
    waitReady: false,
  });
  t.teardown(() => webgpu.stop());
  const cpu = await startServer({ models: models.map((name) => ({ name, gpus: [] })) });
  t.teardown(() => cpu.stop());
  await webgpu.waitFor(async () => (await webgpu.get('/health/ready')).status === 200, 600000);

  // Per model two tiles, A and B: A alone, then A, B, B, A at once, which run as two batches of
  // two with A first in one and last in the other; all three models at the same time.
  const tiles: Record<string, Json[]> = {
    'tissue-seg': ['he-mixed', 'ihc-pale'].map((name) => tileRequest(fixturePng(name), { resolution: 8 })),
    'gene-expr': [1, 2].map((seed) =>
      tileRequest(cellularPng(seed), {
        resolution: 0.5,
        bulk_rna: Array.from({ length: 50 }, (_, i) => (i * seed) % 40),
      }),
    ),
    'tile-embed': [4, 5].map((seed) => tileRequest(cellularPng(seed), { resolution: 0.5 })),
  };
  const paths: Record<string, string> = {
    'tissue-seg': '/api/predict/tissue-seg',
    'gene-expr': '/api/predict/gene-expr?mode=prediction_with_embedding',
    'tile-embed': '/api/embed/tile-embed',
  };
  const ask = async (server: TestServer, model: string, body: Json) => {
    const response = await server.post(paths[model], body);
    if (response.status !== 200) throw new Error(`${model}: ${response.status} ${await response.text()}`);
    return (await response.json()) as Json;
  };
  const answers = Object.fromEntries(
    await Promise.all(
      models.map(async (model) => {
        const [a, b] = tiles[model];
        const alone = await ask(webgpu, model, a);
        const together = await Promise.all([a, b, b, a].map((body) => ask(webgpu, model, body)));
        const reference = await Promise.all([a, b].map((body) => ask(cpu, model, body)));
        return [model, { alone, together, reference }] as const;
      }),
    ),
  );
  const maxDifference = (a: number[], b: number[]) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

  t.test('each model runs on webgpu, on the software device, one compiled shape', async (t) => {
    const { models: list } = (await (await webgpu.get('/api/models')).json()) as Json;
    for (const m of list)
      t.match(
        m.workers[0],
        { provider: 'webgpu', adapter: { software: true }, warmup: { batch_shapes: [2], batch_independent: true } },
        m.name,
      );
  });

  for (const model of models) {
    t.test(`${model}: webgpu equals cpu within float tolerance, and does not depend on its batch`, async (t) => {
      const { alone, together, reference } = answers[model];
      for (const field of ['output', 'embedding'] as const) {
        if (!alone[field]) continue;
        t.same(together[0][field], alone[field], `${field}: A first in a batch of two, the same as alone`);
        t.same(together[3][field], alone[field], `${field}: A last in a batch of two, the same as alone`);
        t.same(together[1][field], together[2][field], `${field}: B first and last, the same`);
        for (const [i, got] of [alone, together[1]].entries()) {
          if (model === 'tissue-seg') {
            const differing = got.output.filter((v: number, k: number) => v !== reference[i].output[k]).length;
            t.ok(differing <= got.output.length / 1000, `mask ${'AB'[i]}: ${differing} pixels differ from cpu`);
          } else {
            const d = maxDifference(got[field], reference[i][field]);
            t.ok(d < 1e-5, `${field} ${'AB'[i]}: at most ${d.toExponential(1)} from cpu`);
          }
        }
      }
    });
  }
}
