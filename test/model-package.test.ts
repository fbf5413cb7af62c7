// The model repository: manifest validation against the real ONNX session, a foreign export
// served from a folder, and reproducible builds of the shipped packages.
import t from 'tap';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import ort from '../src/lib/onnxruntime.js';
import { checkSignature, readPackage, PackageError } from '../src/model-package/model-package.js';
import type { CodesOf } from '../src/lib/errors.js';
import { shippedPackages, writePackage } from '../tools/model-build/build.js';
import { copyPackage, shellDigest } from './helpers/packages.js';
import { fileDigest, packageDigest, packageFiles } from '../src/model-package/package-digest.js';
import { exportPackages, writeExportPackage } from './helpers/export-models.js';
import { MODELS } from './helpers/server.js';
import { tempDir } from '../tools/temp-dir.js';

type PackageCode = CodesOf<'PACKAGE'>;
const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const temp = () => tempDir('pkg');

/** A test export package (the shipped models all take uint8 pixels) with its manifest edited. */
function exportPackage(name: string, edit: (manifest: Record<string, any>) => void): string {
  const pkg = exportPackages().find((p) => p.manifest.name === name)!;
  const manifest = structuredClone(pkg.manifest);
  edit(manifest);
  return writeExportPackage(temp(), { ...pkg, manifest });
}

async function check(dir: string) {
  const pkg = readPackage(dir);
  const session = await ort.InferenceSession.create(pkg.modelPath);
  checkSignature(pkg, session);
}

t.test('the shipped packages pass their own checks and say they are untrained', async (t) => {
  for (const name of ['tissue-seg', 'gene-expr', 'tile-embed']) {
    await check(join(MODELS, name));
    t.equal(readPackage(join(MODELS, name)).manifest.provenance.trained, false, name);
  }
});

t.test('manifest errors have a code and name the file, the field and the mismatch', async (t) => {
  type Case = [string, string, (m: Record<string, any>) => void, PackageCode, RegExp];
  const cases: Case[] = [
    [
      'tensor missing from the graph',
      'gene-expr',
      (m) => (m.tensors.embedding = 'features'),
      'TILE_ERR_PACKAGE_GRAPH',
      /manifest\.json: tensors\.embedding: "features" is not an output of model\.onnx/,
    ],
    [
      'wrong gene count',
      'gene-expr',
      (m) => m.genes.input.pop(),
      'TILE_ERR_PACKAGE_GRAPH',
      /tensors\.bulk: "bulk" dimension 1 is 50, expected 49/,
    ],
    [
      'wrong output gene count',
      'gene-expr',
      (m) => m.genes.output.push('TP53'),
      'TILE_ERR_PACKAGE_GRAPH',
      /genes\.output: "prediction" dimension 1 is 21, expected 22/,
    ],
    [
      'wrong tile size (NHWC uint8 input)',
      'tile-embed',
      (m) => (m.tile.width = 256),
      'TILE_ERR_PACKAGE_GRAPH',
      /tensors\.image: "pixel_values" dimension 2 is 224, expected 256/,
    ],
    [
      'wrong tile size (NCHW float input)',
      'x-bgr',
      (m) => (m.tile.height = 256),
      'TILE_ERR_PACKAGE_GRAPH',
      /tensors\.image: "image" dimension 2 is 64, expected 256/,
    ],
    [
      'input type differs from preprocess.input',
      'tile-embed',
      (m) => (m.preprocess = { scale: 1 / 255, mean: [0, 0, 0], std: [1, 1, 1], channel_order: 'RGB' }),
      'TILE_ERR_PACKAGE_GRAPH',
      /preprocess\.input: "pixel_values" has type uint8: set preprocess\.input "uint8"/,
    ],
    [
      'wrong embedding size',
      'tile-embed',
      (m) => (m.embedding_dim = 128),
      'TILE_ERR_PACKAGE_GRAPH',
      /embedding_dim: "last_hidden_mean" dimension 1 is 160, expected 128/,
    ],
    [
      'task without its tensor',
      'tile-embed',
      (m) => m.tasks.push('prediction'),
      'TILE_ERR_PACKAGE_MANIFEST',
      /tensors\.prediction: task "prediction" needs an output tensor/,
    ],
    [
      'schema violation',
      'tissue-seg',
      (m) => (m.tile.mpp = 'eight'),
      'TILE_ERR_PACKAGE_MANIFEST',
      /invalid manifest: tile\.mpp: must be number/,
    ],
    // Unbounded, these passed --check-config and then crashed every front (tile) or ran the
    // worker out of heap at each load (batch.max with batch_shapes "any").
    ...(
      [
        ['tile', 'width', 100000, 16384],
        ['tile', 'height', 1e308, 16384],
        ['batch', 'max', 1e9, 4096],
      ] as const
    ).map(
      ([part, key, value, max]): Case => [
        `${part}.${key} ${value}`,
        'tissue-seg',
        (m) => (m[part][key] = value),
        'TILE_ERR_PACKAGE_MANIFEST',
        new RegExp(`invalid manifest: ${part}\\.${key}: must be <= ${max}`),
      ],
    ),
    [
      'unassigned graph input',
      'gene-expr',
      (m) => delete m.tensors.bulk,
      'TILE_ERR_PACKAGE_GRAPH',
      /model\.onnx input\(s\) bulk have no role/,
    ],
  ];
  for (const [name, model, edit, code, message] of cases) {
    const error = await check(model.startsWith('x-') ? exportPackage(model, edit) : copyPackage(model, edit)).then(
      () => null,
      (e) => e,
    );
    t.type(error, PackageError, name);
    t.equal(error?.code, code, name);
    t.match(error?.message, message, name);
  }
  const missing = temp();
  t.throws(() => readPackage(missing), {
    code: 'TILE_ERR_PACKAGE_MANIFEST_UNREADABLE',
    message: /manifest\.json: cannot read manifest/,
  });
});

t.test('npm run models:build is reproducible', async (t) => {
  const out = temp();
  for (const build of shippedPackages()) writePackage(out, build);
  for (const name of readdirSync(MODELS)) {
    for (const file of ['model.onnx', 'manifest.json']) {
      t.ok(existsSync(join(out, name, file)), `${name}/${file} rebuilt`);
      t.equal(sha(join(out, name, file)), sha(join(MODELS, name, file)), `${name}/${file} identical`);
    }
  }
});

t.test('the sha256 follows symlinks as find -L does; loops and links to nothing are named', async (t) => {
  const shared = temp();
  for (const name of ['tissue-seg', 'gene-expr']) copyFileSync(join(MODELS, name, 'model.onnx'), join(shared, name));
  mkdirSync(join(shared, 'extra'));
  writeFileSync(join(shared, 'extra', 'notes.txt'), 'weights v1');
  const dir = copyPackage('tissue-seg');
  const copied = packageDigest(dir);
  // Weights on shared storage: model.onnx a link. It was left out of the sha256, so other
  // weights behind the link kept the hash that tile-infer's resume check trusts.
  rmSync(join(dir, 'model.onnx'));
  symlinkSync(join(shared, 'tissue-seg'), join(dir, 'model.onnx'));
  t.equal(packageDigest(dir), copied, 'a linked file counts as the file itself');
  t.equal(readPackage(dir).sha256, copied);
  rmSync(join(dir, 'model.onnx'));
  symlinkSync(join(shared, 'gene-expr'), join(dir, 'model.onnx'));
  t.not(packageDigest(dir), copied, 'other weights behind the link: another sha256');
  symlinkSync(join(shared, 'extra'), join(dir, 'docs'));
  t.same(packageFiles(dir), ['docs/notes.txt', 'manifest.json', 'model.onnx'], 'linked folders are walked');
  t.equal(packageDigest(dir), shellDigest(dir), "as the README's recipe computes it");

  const refused = (link: string, target: string, message: RegExp) => {
    const bad = copyPackage('tissue-seg');
    symlinkSync(target, join(bad, link));
    t.throws(() => readPackage(bad), { code: 'TILE_ERR_PACKAGE_FILE_UNREADABLE', message }, link);
  };
  refused('self', '.', /\/self: a symlink loop \(it leads back to a folder above it\)/);
  refused('weights.bin', 'weights.bin', /\/weights\.bin: a symlink loop/);
  refused('model.onnx.data', join(shared, 'gone'), /\/model\.onnx\.data: a symlink to nothing/);
});

t.test('a read failure names the file that failed, not model.onnx', async (t) => {
  const dir = copyPackage('tissue-seg');
  mkdirSync(join(dir, 'data'));
  // A folder cannot be read as a file: as a >2 GiB file could not, it stands for any read error.
  t.throws(() => fileDigest(join(dir, 'data')), {
    code: 'TILE_ERR_PACKAGE_FILE_UNREADABLE',
    message: `${join(dir, 'data')}: cannot read: EISDIR: illegal operation on a directory, read`,
  });
});

/** A copy of tissue-seg for the digest cache, with whole-second mtimes (utimes can set those back
 *  exactly), once its ctimes are old enough to be cached (the cache skips files changed < 1 s ago). */
async function cachedPackage() {
  const dir = copyPackage('tissue-seg');
  for (const file of packageFiles(dir)) utimesSync(join(dir, file), 1_700_000_000, 1_700_000_000);
  await new Promise((r) => setTimeout(r, 1100));
  const folder = temp();
  const warnings: string[] = [];
  const cache = { folder, warn: (m: string) => warnings.push(m) };
  const cacheFile = () => join(folder, 'package-digests', readdirSync(join(folder, 'package-digests'))[0]);
  return { dir, cache, cacheFile, warnings };
}

t.test('the digest cache gives the digest computed without it, and is what answers once written', async (t) => {
  const { dir, cache, cacheFile, warnings } = await cachedPackage();
  const uncached = packageDigest(dir);
  t.equal(uncached, shellDigest(dir));
  t.equal(readPackage(dir, cache).sha256, uncached, 'first load: every file hashed');
  const written = JSON.parse(readFileSync(cacheFile(), 'utf8'));
  t.same(Object.keys(written.files), ['manifest.json', 'model.onnx'], 'each file cached');
  t.equal(written.files['model.onnx'].sha256, sha(join(dir, 'model.onnx')));
  t.equal(packageDigest(dir, cache), uncached, 'second load: from the cache');
  // Proof that the second load reads the cache, not the file: a sum edited in it is believed.
  written.files['model.onnx'].sha256 = '0'.repeat(64);
  writeFileSync(cacheFile(), JSON.stringify(written));
  t.not(packageDigest(dir, cache), uncached, 'an unchanged file is not read again');
  t.same(warnings, []);
});

t.test('a file changed in place, same size and mtime set back, is hashed again (its ctime moved)', async (t) => {
  const { dir, cache, cacheFile } = await cachedPackage();
  const before = packageDigest(dir, cache);
  const file = join(dir, 'manifest.json');
  const text = readFileSync(file, 'utf8');
  const edited = text.replace('"tissue-seg"', '"tissue-seX"');
  t.equal(edited.length, text.length);
  writeFileSync(file, edited);
  utimesSync(file, 1_700_000_000, 1_700_000_000);
  const after = packageDigest(dir, cache);
  t.not(after, before);
  t.equal(after, shellDigest(dir), 'the edited file hashed again');
  t.notOk(JSON.parse(readFileSync(cacheFile(), 'utf8')).files['manifest.json'], 'changed < 1 s ago: not cached yet');
  t.equal(packageDigest(dir, cache), after);
});

t.test('a corrupt or foreign cache file, or an unwritable folder, is ignored: every file hashed', async (t) => {
  const { dir, cache, cacheFile, warnings } = await cachedPackage();
  const uncached = packageDigest(dir);
  packageDigest(dir, cache);
  const good = JSON.parse(readFileSync(cacheFile(), 'utf8'));
  const wrong = (files: Record<string, { sha256: string }>) =>
    Object.fromEntries(Object.entries(files).map(([f, e]) => [f, { ...e, sha256: '0'.repeat(64) }]));
  const cases: [string, string, RegExp][] = [
    ['torn', JSON.stringify(good).slice(0, 100), /ignored \(.*JSON/],
    [
      'another format',
      JSON.stringify({ ...good, format: 'other/1', files: wrong(good.files) }),
      /ignored \(not one of/,
    ],
    [
      'another folder',
      JSON.stringify({ ...good, dir: '/elsewhere', files: wrong(good.files) }),
      /ignored \(not one of/,
    ],
    ['a sum not hex', JSON.stringify({ ...good, files: { 'model.onnx': { stat: '1', sha256: 'x' } } }), /ignored/],
  ];
  for (const [name, text, warning] of cases) {
    warnings.length = 0;
    writeFileSync(cacheFile(), text);
    t.equal(packageDigest(dir, cache), uncached, name);
    t.match(warnings, [warning], name);
    t.same(JSON.parse(readFileSync(cacheFile(), 'utf8')), good, `${name}: written anew`);
  }
  // A FIFO where the cache file goes (a read would wait for a writer forever) and one too large.
  const path = cacheFile();
  for (const [name, make, warning] of [
    ['a FIFO', (path: string) => execFileSync('mkfifo', [path]), /ignored \(not a regular file\)/],
    ['5 MB', (path: string) => writeFileSync(path, ' '.repeat(5e6)), /ignored \(5000000 bytes, more than/],
  ] as const) {
    warnings.length = 0;
    rmSync(path);
    make(path);
    t.equal(packageDigest(dir, cache), uncached, name);
    t.match(warnings, [warning], name);
    t.same(JSON.parse(readFileSync(cacheFile(), 'utf8')), good, `${name}: replaced by the cache`);
  }
  warnings.length = 0;
  const file = join(temp(), 'a-file');
  writeFileSync(file, '');
  t.equal(packageDigest(dir, { ...cache, folder: file }), uncached, 'a file where the folder goes');
  t.match(warnings, [/package digest cache .* not written \(.*\): the next load hashes again/]);
});
