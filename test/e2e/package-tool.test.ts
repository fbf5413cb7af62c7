// `npm run package`: a generated export (external data, dynamic batch, BGR) becomes a package
// whose skeleton carries what the graph says and marks what only the user knows; once those are
// given the load checks and a warm-up pass; `--lint` refuses a broken package in one line.
import t from 'tap';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { writeForeignPackage } from '../helpers/foreign-model.js';
import ort from '../../src/lib/onnxruntime.js';
import { exportPackages, writeExportPackage } from '../helpers/export-models.js';
import { packageExport } from '../../tools/package/main.js';
import { lintPackage } from '../../tools/package/lint.js';
import { manifestSkeleton } from '../../tools/package/skeleton.js';
import { ROOT } from '../helpers/server.js';
import { tempDir } from '../../tools/temp-dir.js';

const temp = () => tempDir('package');
const byName = (name: string) => exportPackages().find((p) => p.manifest.name === name)!;
/** The command as `npm run package --` runs it (after its tsc step). */
async function packageCli(...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [join(ROOT, 'dist/tools/package/main.js'), ...args],
      { cwd: ROOT },
    );
    return { code: 0, out: stdout };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, out: e.stdout + e.stderr };
  }
}

t.test('an export becomes a manifest skeleton; the user-known fields are TODO until given', async (t) => {
  const exported = join(temp(), 'export');
  writeForeignPackage(exported);
  const out = temp();
  const dir = await packageExport(join(exported, 'model.onnx'), out, { name: 'my-vit' });
  const first = await lintPackage(dir);
  for (const field of [
    'tasks.0',
    'tile.mpp',
    'preprocess.mean',
    'preprocess.std',
    'preprocess.channel_order',
    'tensors.embedding',
    'provenance.trained',
  ]) {
    t.ok(
      first.problems.some((p) => p.startsWith(`${dir}/manifest.json: ${field}: TODO: `)),
      `${field} marked`,
    );
  }
  const skeleton = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
  t.match(skeleton, {
    name: 'my-vit',
    tile: { width: 256, height: 256 },
    tensors: { image: 'input.1' },
    embedding_dim: 48,
    batch: { max: 8 },
    graph: {
      inputs: { 'input.1': 'float32[batch_size,3,256,256]' },
      outputs: { pooler_output: 'float32[batch_size,48]' },
    },
  });
  t.same(
    readFileSync(join(dir, 'model.onnx.data')),
    readFileSync(join(exported, 'model.onnx.data')),
    'external data copied',
  );
  await t.rejects(
    packageExport(join(exported, 'model.onnx'), out, { name: 'my-vit' }),
    /manifest\.json exists; --force replaces it/,
  );

  const facts = {
    name: 'my-vit',
    tasks: ['embedding' as const],
    mpp: 1,
    channelOrder: 'BGR' as const,
    scale: 1 / 255,
    mean: [0.485, 0.456, 0.406] as [number, number, number],
    std: [0.229, 0.224, 0.225] as [number, number, number],
  };
  await packageExport(join(exported, 'model.onnx'), out, facts, true);
  const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
  t.same(
    manifest.preprocess.mean,
    { R: 0.485, G: 0.456, B: 0.406 },
    'mean by channel name, whatever the channel order',
  );
  t.equal(manifest.tensors.embedding, 'pooler_output');
  t.same(
    (await lintPackage(dir)).problems.map((p) => p.split(': ')[1]),
    ['description', 'license', 'provenance.trained', 'provenance.method', 'provenance.source'],
    "the rest is the user's to write",
  );
  writeFileSync(
    join(dir, 'manifest.json'),
    JSON.stringify({
      ...manifest,
      description: 'd',
      license: 'CC0-1.0',
      provenance: { trained: false, method: 'seeded' },
    }),
  );
  const lint = await lintPackage(dir);
  t.same(lint.problems, []);
  t.match(lint.notes, [/warm-up: a batch of 8 synthetic tiles/]);
});

t.test('a graph with its batch fixed at 1 gets batch.max 1', async (t) => {
  const fixed = byName('x-static');
  const session = await ort.InferenceSession.create(fixed.graph.serialize({ docString: '', metadata: {} }).model);
  t.match(manifestSkeleton(session, { name: 'fixed', tasks: ['prediction'] }), {
    batch: { max: 1 },
    tensors: { image: 'image', prediction: 'pred' },
  });
});

t.test(
  '--lint on the command line: a good package passes, a broken one is refused in one line naming the field',
  async (t) => {
    const good = writeExportPackage(temp(), byName('x-int64'));
    const broken = writeExportPackage(temp(), byName('x-uint8'));
    const manifest = JSON.parse(readFileSync(join(broken, 'manifest.json'), 'utf8'));
    writeFileSync(
      join(broken, 'manifest.json'),
      JSON.stringify({ ...manifest, preprocess: { ...manifest.preprocess, channel_order: 'BGR' } }),
    );
    const { code, out } = await packageCli('--lint', good, broken);
    t.equal(code, 1);
    t.match(out, /x-int64: ok\n/);
    t.match(
      out,
      /\[TILE_ERR_PACKAGE_MANIFEST\] \S*x-uint8\/manifest\.json: preprocess\.mean: with channel_order "BGR" give it by channel name/,
    );
    t.equal(out.split('\n').filter((l) => l.includes('x-uint8')).length, 1, 'one line');
  },
);
