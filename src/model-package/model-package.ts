// Reading a model package folder and checking its manifest against the ONNX graph it ships. Every
// refusal is one line naming the manifest field, so a package that cannot be served fails at
// load, never per request.
import { accessSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { Value } from 'typebox/value';
import { Manifest, taskOutput, type ImageInput } from './manifest.js';
import { manifestErrors } from './manifest-errors.js';
import type { DigestCacheOptions } from './digest-cache.js';
import { packageDigest } from './package-digest.js';
import { PackageError } from './package-error.js';

export { PackageError };

export interface ModelPackage {
  dir: string;
  manifest: Manifest;
  modelPath: string;
  /** Over every file of the package (package-digest.ts). */
  sha256: string;
}

export function readManifest(dir: string): Manifest {
  const file = join(dir, 'manifest.json');
  const fail = (field: string, msg: string): never => {
    throw new PackageError('TILE_ERR_PACKAGE_MANIFEST', `${file}: ${field}: ${msg}`);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new PackageError(
      'TILE_ERR_PACKAGE_MANIFEST_UNREADABLE',
      `${file}: cannot read manifest: ${(err as Error).message}`,
    );
  }
  const errors = Value.Errors(Manifest, raw);
  if (errors.length > 0)
    throw new PackageError(
      'TILE_ERR_PACKAGE_MANIFEST',
      `${file}: invalid manifest: ${manifestErrors(Manifest, raw, errors).join('; ')}`,
    );
  const manifest = raw as Manifest;
  const folder = basename(resolve(dir));
  if (manifest.name !== folder)
    fail('name', `"${manifest.name}" differs from its folder "${folder}"; the name is the package's folder name`);
  for (const task of manifest.tasks) {
    if (!manifest.tensors[taskOutput[task]])
      fail(`tensors.${taskOutput[task]}`, `task "${task}" needs an output tensor for role "${taskOutput[task]}"`);
  }
  if (manifest.tensors.bulk && !manifest.genes) fail('genes', 'required when tensors.bulk is set');
  const p = manifest.preprocess;
  if (p.input === 'uint8') {
    for (const key of ['scale', 'mean', 'std'] as const) {
      if (p[key] !== undefined)
        fail(
          `preprocess.${key}`,
          'not used with preprocess.input "uint8" (the graph normalizes the decoded bytes); remove it',
        );
    }
  } else {
    for (const key of ['scale', 'mean', 'std'] as const) {
      if (p[key] === undefined)
        fail(`preprocess.${key}`, `required for a float image input (preprocess.input "${p.input ?? 'float32'}")`);
    }
    for (const key of ['mean', 'std'] as const) {
      if (Array.isArray(p[key]) && p.channel_order === 'BGR') {
        fail(
          `preprocess.${key}`,
          `with channel_order "BGR" give it by channel name, {"R": r, "G": g, "B": b}: an array is ambiguous between RGB and BGR order`,
        );
      }
    }
  }
  if (manifest.mask_channel && !manifest.tensors.mask) fail('mask_channel', 'set without a tensors.mask output');
  return manifest;
}

/** `digestCache`: where the service keeps each file's sha256 between loads (its data_dir); the
 *  tools, which know no such folder, hash every file. */
export function readPackage(dir: string, digestCache?: DigestCacheOptions): ModelPackage {
  const manifest = readManifest(dir);
  const modelPath = join(dir, 'model.onnx');
  try {
    accessSync(modelPath);
  } catch (err) {
    throw new PackageError(
      'TILE_ERR_PACKAGE_MODEL_UNREADABLE',
      `${modelPath}: cannot read model: ${(err as Error).message}`,
    );
  }
  // Its own errors name the file they concern (TILE_ERR_PACKAGE_FILE_UNREADABLE), not model.onnx.
  return { dir, manifest, modelPath, sha256: packageDigest(dir, digestCache) };
}

/** What the checks need of an ONNX Runtime session (InferenceSession satisfies it). */
export interface SessionSignature {
  inputNames: readonly string[];
  outputNames: readonly string[];
  inputMetadata: readonly TensorMeta[];
  outputMetadata: readonly TensorMeta[];
}
export interface TensorMeta {
  name: string;
  isTensor: boolean;
  type?: string;
  shape?: readonly (number | string)[];
}

/** How the worker serves a package whose manifest passed the checks against its graph. */
export interface ServingPlan {
  /** preprocess.input, or the graph's float type when the manifest leaves it out. */
  imageInput: ImageInput;
  bulkInput: 'float32' | 'float16';
  /** batch.max, or less where the graph fixes its batch dimension. */
  maxBatch: number;
  /** What the plan changed from the manifest, for the log and the lint. */
  warnings: string[];
}

/** A tensor as `npm run package` writes it into the manifest's `graph`: "float32[batch,3,224,224]". */
export const describeTensor = (m: TensorMeta) => `${m.type ?? 'unknown'}[${(m.shape ?? []).join(',')}]`;

export const FLOAT_TYPES = ['float32', 'float16', 'float64'];
/** Output element types the worker turns into JSON numbers (int64 exactly up to 2^53). */
export const NUMBER_TYPES = [...FLOAT_TYPES, 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64'];
const MASK_TYPES = [...NUMBER_TYPES, 'bool'];

/** Throws a PackageError naming the manifest field and the mismatch with the graph. */
export function checkSignature(pkg: ModelPackage, session: SessionSignature): ServingPlan {
  const { manifest } = pkg;
  const file = join(pkg.dir, 'manifest.json');
  const fail = (field: string, msg: string): never => {
    throw new PackageError(
      'TILE_ERR_PACKAGE_GRAPH',
      `${file}: ${field}: ${msg} (model.onnx inputs: ${session.inputNames.join(', ')}; outputs: ${session.outputNames.join(', ')})`,
    );
  };
  const meta = (list: readonly TensorMeta[], name: string) => list.find((m) => m.name === name);
  const expectDims = (field: string, m: TensorMeta | undefined, want: (number | null)[]) => {
    const shape = m?.shape;
    if (!shape) return;
    if (shape.length !== want.length)
      fail(
        field,
        `"${m.name}" has rank ${shape.length}, expected ${want.length} ([${want.map((d) => d ?? 'N').join(', ')}])`,
      );
    want.forEach((d, i) => {
      if (d !== null && typeof shape[i] === 'number' && shape[i] !== d)
        fail(field, `"${m.name}" dimension ${i} is ${shape[i]}, expected ${d}`);
    });
  };
  const expectType = (field: string, m: TensorMeta | undefined, allowed: string[], what: string) => {
    if (m?.type && !allowed.includes(m.type))
      fail(field, `"${m.name}" has type ${m.type}; ${what} may be ${allowed.join(', ')}`);
  };

  for (const [kind, declared] of Object.entries(manifest.graph ?? {}) as [
    'inputs' | 'outputs',
    Record<string, string>,
  ][]) {
    const list = kind === 'inputs' ? session.inputMetadata : session.outputMetadata;
    for (const [name, described] of Object.entries(declared)) {
      const m = meta(list, name);
      const actual = m ? describeTensor(m) : 'absent';
      if (actual !== described)
        fail(
          `graph.${kind}.${name}`,
          `model.onnx has ${actual}, the manifest says ${described} (another export than the one packaged?)`,
        );
    }
  }

  const roles = manifest.tensors;
  const inputs = new Set<string>([roles.image, ...(roles.bulk ? [roles.bulk] : [])]);
  for (const [role, name] of Object.entries(roles)) {
    if (name === undefined) continue;
    const isInput = role === 'image' || role === 'bulk';
    const names = isInput ? session.inputNames : session.outputNames;
    if (!names.includes(name))
      fail(`tensors.${role}`, `"${name}" is not ${isInput ? 'an input' : 'an output'} of model.onnx`);
  }
  const extra = session.inputNames.filter((n) => !inputs.has(n));
  if (extra.length) fail('tensors', `model.onnx input(s) ${extra.join(', ')} have no role in the manifest`);

  const image = meta(session.inputMetadata, roles.image);
  const { height, width } = manifest.tile;
  const declared = manifest.preprocess.input;
  const graphType = image?.type ?? declared ?? 'float32';
  if (!['float32', 'float16', 'uint8'].includes(graphType))
    fail('tensors.image', `"${roles.image}" has type ${graphType}; image inputs may be float32, float16 or uint8`);
  if (declared !== undefined && declared !== graphType) {
    fail(
      'preprocess.input',
      `"${roles.image}" has type ${graphType} in model.onnx, the manifest says "${declared}"; allowed: "float32", "float16", "uint8", set "${graphType}"`,
    );
  }
  if (declared === undefined && graphType === 'uint8') {
    fail(
      'preprocess.input',
      `"${roles.image}" has type uint8: set preprocess.input "uint8" (the graph normalizes) and remove scale, mean and std`,
    );
  }
  const imageInput = graphType as ImageInput;
  expectDims('tensors.image', image, imageInput === 'uint8' ? [null, height, width, 3] : [null, 3, height, width]);

  let bulkInput: ServingPlan['bulkInput'] = 'float32';
  if (roles.bulk) {
    const bulk = meta(session.inputMetadata, roles.bulk);
    expectType('tensors.bulk', bulk, ['float32', 'float16'], 'a bulk input');
    bulkInput = (bulk?.type ?? 'float32') as ServingPlan['bulkInput'];
    expectDims('tensors.bulk', bulk, [null, manifest.genes!.input.length]);
  }
  if (roles.prediction) {
    const m = meta(session.outputMetadata, roles.prediction);
    expectType('tensors.prediction', m, NUMBER_TYPES, 'a prediction output');
    if (manifest.genes) expectDims('genes.output', m, [null, manifest.genes.output.length]);
  }
  if (roles.embedding) {
    const m = meta(session.outputMetadata, roles.embedding);
    expectType('tensors.embedding', m, NUMBER_TYPES, 'an embedding output');
    if (manifest.embedding_dim === undefined) fail('embedding_dim', 'required for a model with an embedding output');
    expectDims('embedding_dim', m, [null, manifest.embedding_dim!]);
  }
  if (roles.mask) checkMask(manifest, meta(session.outputMetadata, roles.mask), fail, expectType);

  // A graph exported without dynamic_axes fixes its batch dimension.
  const warnings: string[] = [];
  let maxBatch = manifest.batch.max;
  for (const m of [...session.inputMetadata, ...session.outputMetadata]) {
    const batch = m.shape?.[0];
    if (typeof batch !== 'number' || batch === maxBatch) continue;
    const fix = `export with dynamic_axes={"${m.name}": {0: "batch"}} to batch tiles`;
    if (batch !== 1)
      fail(
        'batch.max',
        `model.onnx fixes the batch dimension of "${m.name}" at ${batch}; the service runs batches of 1 to batch.max: ${fix}`,
      );
    maxBatch = 1;
    warnings.push(
      `batch.max: ${manifest.batch.max}, but model.onnx fixes the batch dimension of "${m.name}" at 1: one tile per run (${fix})`,
    );
  }
  return { imageInput, bulkInput, maxBatch, warnings: [...new Set(warnings)] };
}

function checkMask(
  manifest: Manifest,
  m: TensorMeta | undefined,
  fail: (field: string, msg: string) => never,
  expectType: (field: string, m: TensorMeta | undefined, allowed: string[], what: string) => void,
): void {
  const name = manifest.tensors.mask!;
  expectType('tensors.mask', m, MASK_TYPES, 'a mask output');
  const shape = m?.shape;
  const channel = manifest.mask_channel;
  if (shape) {
    if (shape.length !== 3 && shape.length !== 4)
      fail(
        'tensors.mask',
        `"${name}" has rank ${shape.length}, expected [N, H, W], [N, 1, H, W] or [N, C, H, W] with mask_channel`,
      );
    const [h, w] = shape.slice(-2);
    const { height, width } = manifest.tile;
    if ((typeof h === 'number' && h !== height) || (typeof w === 'number' && w !== width)) {
      fail(
        'tensors.mask',
        `"${name}" has shape [${shape.join(', ')}], its last two dimensions must be the tile's ${height}x${width}`,
      );
    }
    const channels = shape.length === 4 ? shape[1] : 1;
    if (channel && shape.length === 3)
      fail('mask_channel', `"${name}" is [N, H, W]: there are no channels to choose from; remove mask_channel`);
    if (!channel && typeof channels === 'number' && channels > 1) {
      fail(
        'mask_channel',
        `"${name}" has ${channels} channels ([${shape.join(', ')}]): say which is tissue, {"index": <channel>, "rule": "argmax"} (or "threshold" with mask_threshold)`,
      );
    }
    if (channel && typeof channels === 'number' && channel.index >= channels)
      fail('mask_channel.index', `${channel.index} but "${name}" has ${channels} channels`);
  }
  const isFloat = m?.type === undefined || FLOAT_TYPES.includes(m.type);
  const thresholded = channel?.rule !== 'argmax';
  if (isFloat && thresholded && manifest.mask_threshold === undefined)
    fail(
      'mask_threshold',
      `required because "${name}" is ${m?.type ?? 'float'} (tissue where value > mask_threshold; 0 for logits, 0.5 for probabilities)`,
    );
  if (!thresholded && manifest.mask_threshold !== undefined)
    fail('mask_threshold', 'not used with mask_channel.rule "argmax"; remove it');
  if (!isFloat && manifest.mask_threshold !== undefined) {
    fail(
      'mask_threshold',
      `"${name}" is ${m!.type}: integer and bool masks are tissue where the value is not 0; mask_threshold is for float masks, remove it`,
    );
  }
}
