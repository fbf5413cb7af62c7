// A tile's outputs do not depend on what else is in its batch: the same tile alone and inside a
// burst of 24 gives the same bytes. (Before, a tile-embed tile alone and in a burst differed in
// 2,820 values by up to 1.4e-7: ONNX Runtime's cpu kernels take other paths by batch size and by
// a row's place in the batch.) Once with "auto" (on cpu: one tile per run) and once with a list
// of shapes, where lone tiles and short batches are padded.
import t from 'tap';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODELS, startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { tempDir } from '../../tools/temp-dir.js';

type Json = Record<string, any>;

/** tile-embed under another name, so that one service runs it with two settings. */
function renamed(name: string): string {
  const dir = join(tempDir('pkg'), name);
  mkdirSync(dir);
  copyFileSync(join(MODELS, 'tile-embed', 'model.onnx'), join(dir, 'model.onnx'));
  writeFileSync(
    join(dir, 'manifest.json'),
    JSON.stringify({ ...JSON.parse(readFileSync(join(MODELS, 'tile-embed', 'manifest.json'), 'utf8')), name }),
  );
  return dir;
}

const server = await startServer({
  models: [
    { name: 'tile-embed', instances: 2, gpus: [] },
    { name: 'gene-expr', gpus: [] },
    {
      name: 'tile-embed-padded',
      path: renamed('tile-embed-padded'),
      gpus: [],
      max_batch: 4,
      batch_shapes: [2, 4],
      intra_op_threads: 1,
    },
  ],
});
t.teardown(() => server.stop());

const tile = tileRequest(cellularPng(5), { resolution: 0.5 });
/** The same tile at places 0, 11 and 23 of 24 sent at once, the others distinct. */
const burst = Array.from({ length: 24 }, (_, i) =>
  [0, 11, 23].includes(i) ? tile : tileRequest(cellularPng(100 + i), { resolution: 0.5, patch_idx: i }),
);

async function outputs(path: string, bodies: Json[]): Promise<Json[]> {
  return Promise.all(
    bodies.map(async (body) => {
      const response = await server.post(path, body);
      if (response.status !== 200) throw new Error(`${path}: ${response.status} ${await response.text()}`);
      return (await response.json()) as Json;
    }),
  );
}

/** Same numbers, bit for bit (the JSON carries a float32's exact decimal). */
const identical = (a: number[], b: number[]) => a.length === b.length && a.every((v, i) => Object.is(v, b[i]));

for (const [model, path, field] of [
  ['tile-embed', '/api/embed/tile-embed', 'output'],
  ['gene-expr', '/api/predict/gene-expr?mode=prediction_with_embedding', 'output'],
  ['gene-expr', '/api/predict/gene-expr?mode=prediction_with_embedding', 'embedding'],
  ['tile-embed-padded', '/api/embed/tile-embed-padded', 'output'],
] as const) {
  t.test(`${model}: ${field} of a tile alone and inside a burst of 24`, async (t) => {
    const [alone] = await outputs(path, [tile]);
    const all = await outputs(path, burst);
    for (const i of [0, 11, 23]) t.ok(identical(all[i][field], alone[field]), `place ${i}: the same bytes as alone`);
  });
}

t.test('what warm-up found is in /api/models', async (t) => {
  const { models } = (await (await server.get('/api/models')).json()) as Json;
  const byName = Object.fromEntries(models.map((m: Json) => [m.name, m]));
  t.match(
    byName['tile-embed'].workers[0].warmup,
    { batch_shapes: [1], batch_independent: true, shapes: [{ batch: 1, identical: true }] },
    'cpu, auto: one tile per run',
  );
  const padded = byName['tile-embed-padded'].workers[0].warmup;
  t.ok(padded.batch_independent);
  t.notOk(padded.batch_shapes.includes(1), `a lone tile runs padded, in ${padded.batch_shapes}`);
  // Tiles batched together on the padded model: its batches of 2 and 4 were used.
  const metrics = await (await server.get('/metrics')).text();
  const batches =
    /model_batch_size_bucket\{le="1",model="tile-embed-padded"\} (\d+)[\s\S]*model_batch_size_count\{model="tile-embed-padded"\} (\d+)/.exec(
      metrics,
    );
  t.ok(
    batches && Number(batches[2]) > Number(batches[1]),
    'some tiles of the padded model ran in batches of more than one',
  );
});
