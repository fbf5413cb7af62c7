// A model that is only a folder: a foreign export (other tensor names and tile size, a dynamic
// batch axis, external data) served by the real service, batched, with its own metadata.
import t from 'tap';
import { statSync, truncateSync } from 'node:fs';
import { join } from 'node:path';
import { writeForeignPackage } from '../helpers/foreign-model.js';
import { shellDigest } from '../helpers/packages.js';
import { startServer } from '../helpers/server.js';
import { cellularPng, tileRequest } from '../helpers/tiles.js';
import { tempDir } from '../../tools/temp-dir.js';
t.test('a foreign export (other names and size, dynamic batch, external data) serves from a folder', async (t) => {
  const dir = join(tempDir('pkg'), 'foreign-vit');
  writeForeignPackage(dir);
  const server = await startServer({ models: [{ name: 'foreign-vit', path: dir, max_queue_delay_ms: 5 }] });
  t.teardown(() => server.stop());
  const png = cellularPng(5, 256);
  const responses = await Promise.all(
    [1, 2, 3].map(() => server.post('/api/embed/foreign-vit', tileRequest(png, { resolution: 1.0 }))),
  );
  const bodies = await Promise.all(responses.map((r) => r.json() as Promise<Record<string, any>>));
  t.same(
    responses.map((r) => r.status),
    [200, 200, 200],
  );
  t.equal(bodies[0].output.length, 48);
  t.same(bodies[1].output, bodies[0].output, 'batched requests agree');
  const meta = (await (await server.get('/api/metadata/foreign-vit')).json()) as Record<string, any>;
  t.match(meta, {
    model: 'foreign-vit',
    tile: { width: 256, height: 256, mpp: 1 },
    embedding_dim: 48,
    trained: false,
    sha256: shellDigest(dir),
  });
  t.equal(
    (await server.post('/api/embed/foreign-vit', tileRequest(cellularPng(5, 224)))).status,
    422,
    'its own tile size applies',
  );
});

t.test('external data over 2 GiB (a sparse file here) loads, serves and is in the sha256', async (t) => {
  // readFileSync stops at 2 GiB: the package was unloadable, and the error blamed model.onnx.
  const dir = join(tempDir('pkg'), 'foreign-vit');
  writeForeignPackage(dir);
  const data = join(dir, 'model.onnx.data');
  truncateSync(data, 2 ** 31 + statSync(data).size); // zeros after the weights the graph points at
  const server = await startServer({ models: [{ name: 'foreign-vit', path: dir }] });
  t.teardown(() => server.stop());
  t.equal(
    (await server.post('/api/embed/foreign-vit', tileRequest(cellularPng(5, 256), { resolution: 1.0 }))).status,
    200,
  );
  const meta = (await (await server.get('/api/metadata/foreign-vit')).json()) as Record<string, any>;
  t.equal(meta.sha256, shellDigest(dir), 'the whole file hashed, as sha256sum does');
});
