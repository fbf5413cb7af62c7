// Bring your own export: packages shaped like torch.onnx.export output (class-channel logits,
// int64/uint8/float16/int32/float64 outputs, float16 input, a fixed batch of 1, BGR) served by
// the real service, each answer checked against one computed independently from the tile's
// pixels; and packages that cannot be served refused at load or warm-up with one line naming the
// field, and their code in the log. All are built here by the project's ONNX writer
// (test/helpers/export-models.ts). Where ../shared/interop exists (packages that PyTorch itself
// exported, with answers PyTorch computed), the same checks run on them as a cross-check.
import t, { type Test } from 'tap';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { startServer, ROOT, type TestServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { shellDigest } from '../helpers/packages.js';
import {
  SIZE,
  exportPackages,
  expectedAnswer,
  floatSegPackage,
  symbolicSegPackage,
  writeExportPackage,
} from '../helpers/export-models.js';
import type { Pixels } from '../../src/tile/png.js';
import { tempDir } from '../../tools/temp-dir.js';

const INTEROP = process.env.INTEROP_DIR ?? join(ROOT, '../shared/interop');

const pixelsOf = (png: Buffer): Pixels => {
  const { width, height, data } = PNG.sync.read(png);
  return { width, height, channels: 4, data };
};
const closeTo = (actual: number[], expected: number[], tolerance = 1e-5) =>
  actual.length === expected.length &&
  actual.every((v, i) => Math.abs(v - expected[i]) <= tolerance * Math.max(1, Math.abs(expected[i])));
const json = async (res: Response) => ({ status: res.status, body: (await res.json()) as Record<string, any> });
const models = (root: string) =>
  readdirSync(root).map((name) => ({ name, path: join(root, name), intra_op_threads: 1, max_queue_delay_ms: 20 }));

/** Waits until a model's workers report ready (its metadata answers) or a load failure. */
async function modelState(server: TestServer, name: string): Promise<{ ready: boolean; lastError: string | null }> {
  let state = { ready: false, lastError: null as string | null };
  await server.waitFor(async () => {
    if ((await server.get(`/api/metadata/${name}`)).status === 200)
      return ((state = { ready: true, lastError: null }), true);
    // A probe past its timeout (workers busy loading) is {"error": ...}: ask again.
    const { workers } = (await (await server.get('/diagnostics')).json()) as {
      workers: { model: string; last_error: string | null }[] | { error: string };
    };
    const error = Array.isArray(workers) ? (workers.find((w) => w.model === name)?.last_error ?? null) : null;
    state = { ready: false, lastError: error };
    return error !== null;
  }, 60000);
  return state;
}

/** The code the supervisor logged when the model failed to load. */
async function failureCode(server: TestServer, name: string): Promise<unknown> {
  const logged = () => server.lines.find((l) => l.model === name && String(l.msg).startsWith('model failed to load'));
  await server.waitFor(() => logged() !== undefined);
  return logged()!.errorCode;
}

/** Beside a class-channel package as exported (float logits [N, 2, H, W], mask_threshold set, no
 *  mask_channel), a copy whose manifest says channel 1 wins the argmax; returns the copy's name. */
function addArgmaxCopy(root: string, name: string): string {
  const copy = `${name}-argmax`;
  cpSync(join(root, name), join(root, copy), { recursive: true });
  const manifest = JSON.parse(readFileSync(join(root, copy, 'manifest.json'), 'utf8'));
  delete manifest.mask_threshold;
  writeFileSync(
    join(root, copy, 'manifest.json'),
    JSON.stringify({ ...manifest, name: copy, mask_channel: { index: 1, rule: 'argmax' } }),
  );
  return copy;
}

/** The package as exported cannot say which channel is tissue: refused at load, one line naming
 *  mask_channel and the tensor's channels, TILE_ERR_PACKAGE_GRAPH in the log. */
async function refusedForChannels(t: Test, server: TestServer, name: string, tensor: string): Promise<void> {
  const { ready, lastError } = await modelState(server, name);
  t.equal(ready, false, `${name} is not served`);
  t.match(lastError, new RegExp(`manifest\\.json: mask_channel: "${tensor}" has 2 channels`));
  t.notMatch(lastError, /\n/, 'one line');
  t.equal(await failureCode(server, name), 'TILE_ERR_PACKAGE_GRAPH');
}

const root = tempDir('exports');
const packages = exportPackages();
for (const p of [...packages, symbolicSegPackage(), floatSegPackage()]) writeExportPackage(root, p);
const floatArgmax = addArgmaxCopy(root, 'x-seg-c2-float');
const server = await startServer({ models: models(root), waitReady: false });
t.teardown(() => server.stop());
const tiles = [3, 17, 29, 41, 53, 67, 71, 83].map((seed) => cellularPng(seed, SIZE));

for (const { manifest } of packages) {
  t.test(`${manifest.name} answers as computed from the pixels`, async (t) => {
    t.same(await modelState(server, manifest.name), { ready: true, lastError: null });
    const segmentation = manifest.tasks[0] === 'segmentation';
    const path =
      segmentation || manifest.tasks[0] === 'prediction'
        ? `/api/predict/${manifest.name}`
        : `/api/embed/${manifest.name}`;
    // Concurrent requests, so batches of several tiles form (a fixed batch of 1 too: 8 at once).
    const answers = await Promise.all(
      tiles.map(async (png) => json(await server.post(path, tileRequest(png, { resolution: 0.5 })))),
    );
    answers.forEach(({ status, body }, i) => {
      const expected = expectedAnswer(manifest.name, pixelsOf(tiles[i]));
      t.equal(status, 200, `tile ${i}`);
      if (segmentation) {
        t.same(body.output, expected, `tile ${i}: mask`);
        t.equal(body.tissue_ratio, expected.reduce((a, b) => a + b, 0) / expected.length);
      } else {
        t.ok(closeTo(body.output, expected), `tile ${i}: ${JSON.stringify(body.output)} ~ ${JSON.stringify(expected)}`);
      }
    });
    const meta = await json(await server.get(`/api/metadata/${manifest.name}`));
    t.equal(meta.body.sha256, shellDigest(join(root, manifest.name)), 'sha256 over the package files');
  });
}

t.test('x-fp16-out: float16 values, not their bit patterns', async (t) => {
  const { body } = await json(await server.post('/api/predict/x-fp16-out', tileRequest(tiles[0], { resolution: 0.5 })));
  for (const v of body.output as number[]) t.ok(Math.abs(v) < 10, `${v} is a decoded value`);
});

t.test('x-int32-f64: int32 prediction and float64 embedding of one pass', async (t) => {
  const { status, body } = await json(
    await server.post(
      '/api/predict/x-int32-f64?mode=prediction_with_embedding',
      tileRequest(tiles[1], { resolution: 0.5 }),
    ),
  );
  t.equal(status, 200);
  const pixels = pixelsOf(tiles[1]);
  t.same(body.output, expectedAnswer('x-int32-f64', pixels));
  t.ok(body.output.every(Number.isInteger), 'integers');
  t.ok(closeTo(body.embedding, expectedAnswer('x-static', pixels)), 'embedding: the class means');
});

t.test('a fixed batch of 1 with batch.max 8 is clamped, and the log says so', async (t) => {
  t.ok(
    server.lines.some((l) =>
      /batch\.max: 8, but model\.onnx fixes the batch dimension of "image" at 1/.test(String(l.msg)),
    ),
  );
});

t.test(
  'class-channel logits without mask_channel are refused at warm-up, naming tensors.mask and the shape',
  async (t) => {
    const { ready, lastError } = await modelState(server, 'x-seg-symbolic');
    t.equal(ready, false);
    t.match(lastError, /tensors\.mask: "logits" has shape \[1, 2, 64, 64\]/);
    t.notMatch(lastError, /\n/, 'one line');
    t.equal(await failureCode(server, 'x-seg-symbolic'), 'TILE_ERR_PACKAGE_OUTPUT_SHAPE');
    const res = await server.post('/api/predict/x-seg-symbolic', tileRequest(tiles[0], { resolution: 0.5 }));
    t.equal(res.status, 503, 'not served: loading, never a per-request 500');
  },
);

t.test(
  'class-channel float logits with a threshold and no mask_channel: refused at load; with mask_channel argmax, served',
  async (t) => {
    await refusedForChannels(t, server, 'x-seg-c2-float', 'logits');
    t.same(await modelState(server, floatArgmax), { ready: true, lastError: null });
    const answers = await Promise.all(
      tiles.map(async (png) =>
        json(await server.post(`/api/predict/${floatArgmax}`, tileRequest(png, { resolution: 0.5 }))),
      ),
    );
    answers.forEach(({ status, body }, i) => {
      t.equal(status, 200, `tile ${i}`);
      t.same(body.output, expectedAnswer(floatArgmax, pixelsOf(tiles[i])), `tile ${i}: channel 1 wins`);
    });
  },
);

// A cross-check only: everything above runs without it, on packages built here.
t.test(
  'cross-check: the PyTorch-made interop packages (../shared/interop), when that folder exists',
  { skip: !existsSync(INTEROP) && `no ${INTEROP} in this checkout: the same checks ran above on packages built here` },
  async (t) => {
    const copies = tempDir('interop');
    const names = readdirSync(INTEROP).filter((n) => existsSync(join(INTEROP, n, 'manifest.json')));
    for (const name of names) cpSync(join(INTEROP, name), join(copies, name), { recursive: true });
    const fixed = addArgmaxCopy(copies, 'r-seg-c2');
    const interop = await startServer({ models: models(copies), waitReady: false });
    t.teardown(() => interop.stop());
    const png = readFileSync(join(INTEROP, 'tile-64.png'));
    await refusedForChannels(t, interop, 'r-seg-c2', 'seg_c2');
    for (const name of [...names.filter((n) => n !== 'r-seg-c2'), fixed]) {
      t.same(await modelState(interop, name), { ready: true, lastError: null }, name);
      const expected = JSON.parse(
        readFileSync(join(INTEROP, name === fixed ? 'r-seg-c2' : name, 'expected.json'), 'utf8'),
      );
      const answers = await Promise.all(
        Array.from({ length: name === 'r-static' ? 8 : 1 }, async () =>
          json(await interop.post(`/api/predict/${name}`, tileRequest(png, { resolution: 0.5 }))),
        ),
      );
      for (const { status, body } of answers) {
        t.equal(status, 200, name);
        if (expected.mask_argmax_class_1) t.same(body.output, expected.mask_argmax_class_1, name);
        else
          t.ok(
            closeTo(body.output, expected.output),
            `${name}: ${JSON.stringify(body.output)} ~ ${JSON.stringify(expected.output)}`,
          );
      }
    }
  },
);
