// Checks at load for packages as torch.onnx.export writes them: manifest errors that list the
// allowed values, dtype and shape refusals naming the manifest field, the batch clamp, the
// float16 codec against ONNX Runtime's own Cast, class-channel masks, the package sha256, and what
// crosses to the session thread: a tensor's own buffer handed over, a view into a larger buffer (an
// Open Inference Protocol batch's IPC frame) copied out alone, since postMessage would clone the
// whole buffer under it for every tile.
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MessageChannel } from 'node:worker_threads';
import ort from '../../src/lib/onnxruntime.js';
import { toWire } from '../../src/worker/model-session.js';
import { checkSignature, readPackage, PackageError } from '../../src/model-package/model-package.js';
import { packageDigest } from '../../src/model-package/package-digest.js';
import { float16ToFloat32, float32ToFloat16 } from '../../src/worker/float16.js';
import { maskOf, maskTensor } from '../../src/worker/outputs.js';
import { Graph, DType, int } from '../../tools/model-build/onnx-graph.js';
import { baseManifest, exportPackages, writeExportPackage, type ExportPackage } from '../helpers/export-models.js';
import { writeForeignPackage } from '../helpers/foreign-model.js';
import { shellDigest } from '../helpers/packages.js';
import { tempDir } from '../../tools/temp-dir.js';

const temp = () => tempDir('exports');
const byName = (name: string) => exportPackages().find((p) => p.manifest.name === name)!;

/** Writes the package, its manifest edited, into a folder named as the unedited manifest. */
function write(p: ExportPackage, edit: (m: Record<string, any>) => void): string {
  const dir = writeExportPackage(temp(), p);
  const manifest = structuredClone(p.manifest) as Record<string, any>;
  edit(manifest);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest));
  return dir;
}

/** The load checks on a real ONNX Runtime session. */
async function load(p: ExportPackage, edit: (m: Record<string, any>) => void = () => {}) {
  const pkg = readPackage(write(p, edit));
  return checkSignature(pkg, await ort.InferenceSession.create(pkg.modelPath));
}
const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (e: Error) => e,
  );

t.test('manifest errors are one line naming the field and the allowed values', async (t) => {
  const cases: [string, (m: Record<string, any>) => void, RegExp][] = [
    [
      'float16 spelled wrong',
      (m) => (m.preprocess.input = 'half'),
      /preprocess\.input: must be one of "float32", "float16", "uint8" \(got "half"\)/,
    ],
    [
      'task misspelled',
      (m) => (m.tasks = ['predicton']),
      /tasks\.0: must be one of "segmentation", "prediction", "embedding" \(got "predicton"\)/,
    ],
    [
      'channel order',
      (m) => (m.preprocess.channel_order = 'bgr'),
      /preprocess\.channel_order: must be one of "RGB", "BGR" \(got "bgr"\)/,
    ],
    [
      'mean neither form',
      (m) => (m.preprocess.mean = { R: 0.5, G: 0.5 }),
      /preprocess\.mean: must be \{"R": r, "G": g, "B": b\} or \[r, g, b\] \(channel_order RGB only\)/,
    ],
    [
      'mask rule',
      (m) => (m.mask_channel = { index: 1, rule: 'max' }),
      /mask_channel\.rule: must be one of "argmax", "threshold" \(got "max"\)/,
    ],
    ['name unlike its folder', (m) => (m.name = 'my-model'), /name: "my-model" differs from its folder "x-int64"/],
    [
      'BGR with an array mean',
      (m) => (m.preprocess.channel_order = 'BGR'),
      /preprocess\.mean: with channel_order "BGR" give it by channel name/,
    ],
    [
      'uint8 input with mean',
      (m) => (m.preprocess.input = 'uint8'),
      /preprocess\.scale: not used with preprocess\.input "uint8"/,
    ],
    ['float input without std', (m) => delete m.preprocess.std, /preprocess\.std: required for a float image input/],
  ];
  for (const [name, edit, message] of cases) {
    const dir = write(byName('x-int64'), edit);
    const error = await refusal(Promise.resolve().then(() => readPackage(dir)));
    t.type(error, PackageError, name);
    t.equal((error as PackageError)?.code, 'TILE_ERR_PACKAGE_MANIFEST', name);
    t.match(error?.message, message, name);
    t.notMatch(error?.message, /must be equal to constant|\n/, `${name}: one line, no per-alternative noise`);
  }
});

t.test('load checks against the graph: dtypes, class channels, input types, batch', async (t) => {
  for (const p of exportPackages()) t.ok(await load(p), `${p.manifest.name} passes`);
  t.equal(
    (await load(byName('x-fp16-in'))).imageInput,
    'float16',
    'no preprocess.input: the graph float16 image is followed',
  );
  const clamped = await load(byName('x-static'));
  t.equal(clamped.maxBatch, 1);
  t.match(clamped.warnings, [/batch\.max: 8, but model\.onnx fixes the batch dimension of "image" at 1/]);

  const refusals: [string, Promise<unknown>, RegExp][] = [
    [
      'class channels without mask_channel',
      load(byName('x-seg-c2'), (m) => delete m.mask_channel),
      /mask_channel: "logits" has 2 channels \(\[batch_size, 2, 64, 64\]\)/,
    ],
    [
      'tissue channel out of range',
      load(byName('x-seg-c2'), (m) => (m.mask_channel.index = 2)),
      /mask_channel\.index: 2 but "logits" has 2 channels/,
    ],
    [
      'argmax with a threshold',
      load(byName('x-seg-c2'), (m) => (m.mask_threshold = 0)),
      /mask_threshold: not used with mask_channel\.rule "argmax"/,
    ],
    [
      'float16 graph, float32 manifest',
      load(byName('x-fp16-in'), (m) => (m.preprocess.input = 'float32')),
      /preprocess\.input: "image" has type float16 in model\.onnx, the manifest says "float32"; allowed: "float32", "float16", "uint8"/,
    ],
    [
      'fixed batch other than 1',
      load(fixedBatch(4)),
      /batch\.max: model\.onnx fixes the batch dimension of "image" at 4/,
    ],
    [
      'threshold on an integer mask',
      load(intMask(), (m) => (m.mask_threshold = 0.5)),
      /mask_threshold: "mask" is int64: integer and bool masks are tissue where the value is not 0/,
    ],
  ];
  for (const [name, promise, message] of refusals) {
    const error = await refusal(promise);
    t.type(error, PackageError, name);
    t.equal((error as PackageError)?.code, 'TILE_ERR_PACKAGE_GRAPH', name);
    t.match((error as Error)?.message, message, name);
    t.notMatch((error as Error)?.message, /\n/, `${name}: one line`);
  }
  t.ok(await load(intMask()), 'an int64 [N, H, W] mask needs no threshold');
});

function fixedBatch(n: number): ExportPackage {
  const g = new Graph('main_graph');
  const x = g.input('image', DType.FLOAT, [n, 3, 64, 64]);
  g.op('ReduceMean', [x], { axes: { ints: [2, 3] }, keepdims: int(0) }, 'pred');
  g.output('pred', DType.FLOAT, [n, 3]);
  return { manifest: baseManifest('x-fixed', {}), graph: g };
}

function intMask(): ExportPackage {
  const g = new Graph('main_graph');
  const x = g.input('image', DType.FLOAT, ['batch_size', 3, 64, 64]);
  g.op('ArgMax', [x], { axis: int(1), keepdims: int(0) }, 'mask');
  g.output('mask', DType.INT64, ['batch_size', 64, 64]);
  return {
    manifest: baseManifest('x-int-mask', { tasks: ['segmentation'], tensors: { image: 'image', mask: 'mask' } }),
    graph: g,
  };
}

t.test('float16 codec agrees with ONNX Runtime Cast, both ways', async (t) => {
  const g = new Graph('cast');
  g.input('x', DType.FLOAT, ['n']);
  g.input('h', DType.FLOAT16, ['n']);
  g.op('Cast', ['x'], { to: int(DType.FLOAT16) }, 'to_half');
  g.op('Cast', ['h'], { to: int(DType.FLOAT) }, 'to_float');
  g.output('to_half', DType.FLOAT16, ['n']);
  g.output('to_float', DType.FLOAT, ['n']);
  const session = await ort.InferenceSession.create(g.serialize({ docString: '', metadata: {} }).model);
  // Every float16 bit pattern, each halfway point between neighbours (ties to even), subnormals,
  // overflow, and a spread of ordinary values.
  const bits = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const decoded = float16ToFloat32(bits);
  const ties = Float32Array.from({ length: 30000 }, (_, i) => (decoded[i] + decoded[i + 1]) / 2);
  const values = Float32Array.from([
    ...ties,
    0,
    -0,
    1e-8,
    6e-8,
    65504,
    65519,
    65520,
    1e6,
    -1e6,
    Infinity,
    -Infinity,
    ...Array.from({ length: 2000 }, (_, i) => Math.sin(i) * 10 ** ((i % 12) - 6)),
  ]);
  const out = await session.run({
    x: new ort.Tensor('float32', values, [values.length]),
    h: new ort.Tensor('float16', bits, [bits.length]),
  });
  const encoded = float32ToFloat16(values);
  const half = out.to_half.data as Uint16Array;
  t.equal(
    encoded.findIndex((h, i) => h !== half[i]),
    -1,
    `encode: ${values.length} values`,
  );
  const reference = out.to_float.data as Float32Array;
  t.equal(
    decoded.findIndex((v, i) => !Object.is(v, reference[i]) && !(Number.isNaN(v) && Number.isNaN(reference[i]))),
    -1,
    'decode of all 65536 patterns',
  );
});

t.test('class-channel masks: argmax takes the first maximum, as torch.argmax', async (t) => {
  const manifest = baseManifest('m', {
    tile: { width: 4, height: 1, mpp: 1, mpp_tolerance: 0 },
    mask_channel: { index: 1, rule: 'argmax' },
  });
  // Three classes, four pixels: class 1 wins; ties class 0 (0 wins); ties class 2 (1 wins); loses.
  const logits = Float32Array.from([0, 1, 0, 0, /* class 1 */ 2, 1, 1, 0, /* class 2 */ 0, 0, 1, 5]);
  const { mask, tissueFraction } = maskOf(manifest, { type: 'float32', data: logits, dims: [1, 3, 1, 4] }, 0);
  t.same(Array.from(mask), [1, 0, 1, 0]);
  t.equal(tissueFraction, 0.5);
  const threshold = maskOf(
    { ...manifest, mask_channel: { index: 2, rule: 'threshold' }, mask_threshold: 0.5 },
    { type: 'float32', data: logits, dims: [1, 3, 1, 4] },
    0,
  );
  t.same(Array.from(threshold.mask), [0, 0, 1, 1]);
  const int64 = maskOf(
    baseManifest('m', { tile: manifest.tile }),
    maskTensor({ type: 'int64', data: BigInt64Array.from([0n, 1n, 2n, -1n]), dims: [1, 1, 4] }),
    0,
  );
  t.same(Array.from(int64.mask), [0, 1, 1, 1], 'integer masks: tissue where not 0');
});

t.test('the sha256 covers every file: other external weights, other hash', async (t) => {
  const dir = join(temp(), 'foreign-vit');
  writeForeignPackage(dir);
  const before = packageDigest(dir);
  t.equal(before, shellDigest(dir), 'as the README computes it');
  const graph = readFileSync(join(dir, 'model.onnx'));
  const weights = readFileSync(join(dir, 'model.onnx.data'));
  weights[weights.length - 1] ^= 0xff;
  writeFileSync(join(dir, 'model.onnx.data'), weights);
  t.same(readFileSync(join(dir, 'model.onnx')), graph, 'model.onnx unchanged');
  t.not(packageDigest(dir), before);
  t.equal(readPackage(dir).sha256, packageDigest(dir));
});

t.test('feeds cross alone: a view is copied out, an own buffer handed over', async (t) => {
  const frame = new Uint8Array(32 * 12).map((_, i) => i % 251);
  const tile = frame.subarray(12, 24);
  const own = new Float32Array([1.5, -2, 3.25]);
  const { wire, transfer } = toWire({
    image: new ort.Tensor('uint8', tile, [1, 2, 2, 3]),
    bulk: new ort.Tensor('float32', own, [1, 3]),
  });
  const image = wire.image.data as Uint8Array;
  t.equal(image.buffer.byteLength, 12, "the tile's bytes alone, not the frame's 384");
  t.same([...image], [...tile], 'the same bytes');
  t.ok(wire.bulk.data === own, 'an own buffer is not copied');
  t.ok(wire.bulk.data instanceof Float32Array && image instanceof Uint8Array, 'each keeps its element type');

  const { port1, port2 } = new MessageChannel();
  const arrived = new Promise<{ image: Uint8Array }>((resolve) => port2.once('message', resolve));
  port1.postMessage({ image }, transfer);
  t.equal((await arrived).image.buffer.byteLength, 12, 'and so it arrives');
  t.equal(frame.byteLength, 384, 'the frame stays whole for the other tiles');
  t.equal(own.byteLength, 0, 'the own buffer was handed over');
  port1.close();
});
