// Reading a model package folder and checking its manifest against the ONNX graph it ships.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Value } from 'typebox/value';
import { Manifest, taskOutput } from './manifest.js';

export class PackageError extends Error {
  override name = 'PackageError';
}

export interface ModelPackage {
  dir: string;
  manifest: Manifest;
  modelPath: string;
  sha256: string;
}

const pointer = (instancePath: string) => instancePath.replace(/^\//, '').replaceAll('/', '.') || '(root)';

export function readManifest(dir: string): Manifest {
  const file = join(dir, 'manifest.json');
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new PackageError(`${file}: cannot read manifest: ${(err as Error).message}`);
  }
  const errors = Value.Errors(Manifest, raw);
  if (errors.length > 0) {
    const detail = errors.map((e) => `${pointer(e.instancePath)}: ${e.message}`).join('; ');
    throw new PackageError(`${file}: invalid manifest: ${detail}`);
  }
  const manifest = raw as Manifest;
  for (const task of manifest.tasks) {
    if (!manifest.tensors[taskOutput[task]]) {
      throw new PackageError(`${file}: tensors.${taskOutput[task]}: task "${task}" needs an output tensor for role "${taskOutput[task]}"`);
    }
  }
  if (manifest.tensors.bulk && !manifest.genes) throw new PackageError(`${file}: genes: required when tensors.bulk is set`);
  return manifest;
}

export function readPackage(dir: string): ModelPackage {
  const manifest = readManifest(dir);
  const modelPath = join(dir, 'model.onnx');
  let bytes: Buffer;
  try {
    bytes = readFileSync(modelPath);
  } catch (err) {
    throw new PackageError(`${modelPath}: cannot read model: ${(err as Error).message}`);
  }
  return { dir, manifest, modelPath, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/** What the checks need of an ONNX Runtime session (InferenceSession satisfies it). */
export interface SessionSignature {
  inputNames: readonly string[];
  outputNames: readonly string[];
  inputMetadata: readonly TensorMeta[];
  outputMetadata: readonly TensorMeta[];
}
interface TensorMeta {
  name: string;
  isTensor: boolean;
  type?: string;
  shape?: readonly (number | string)[];
}

/** Throws a PackageError naming the manifest field and the mismatch with the graph. */
export function checkSignature(pkg: ModelPackage, session: SessionSignature): void {
  const { manifest } = pkg;
  const file = join(pkg.dir, 'manifest.json');
  const fail = (field: string, msg: string) => {
    throw new PackageError(`${file}: ${field}: ${msg} (model.onnx inputs: ${session.inputNames.join(', ')}; outputs: ${session.outputNames.join(', ')})`);
  };
  const meta = (list: readonly TensorMeta[], name: string) => list.find((m) => m.name === name);
  const expectDims = (field: string, m: TensorMeta | undefined, want: (number | null)[]) => {
    const shape = m?.shape;
    if (!shape) return;
    if (shape.length !== want.length) fail(field, `"${m.name}" has rank ${shape.length}, expected ${want.length} ([${want.map((d) => d ?? 'N').join(', ')}])`);
    want.forEach((d, i) => {
      if (d !== null && typeof shape[i] === 'number' && shape[i] !== d) fail(field, `"${m.name}" dimension ${i} is ${shape[i]}, expected ${d}`);
    });
  };

  const roles = manifest.tensors;
  const inputs = new Set<string>([roles.image, ...(roles.bulk ? [roles.bulk] : [])]);
  for (const [role, name] of Object.entries(roles)) {
    if (name === undefined) continue;
    const isInput = role === 'image' || role === 'bulk';
    const names = isInput ? session.inputNames : session.outputNames;
    if (!names.includes(name)) fail(`tensors.${role}`, `"${name}" is not ${isInput ? 'an input' : 'an output'} of model.onnx`);
  }
  const extra = session.inputNames.filter((n) => !inputs.has(n));
  if (extra.length) fail('tensors', `model.onnx input(s) ${extra.join(', ')} have no role in the manifest`);

  const image = meta(session.inputMetadata, roles.image);
  const { height, width } = manifest.tile;
  const uint8 = manifest.preprocess.input === 'uint8';
  const imageType = uint8 ? 'uint8' : 'float32';
  if (image?.type && image.type !== imageType) fail('tensors.image', `"${roles.image}" has type ${image.type}, expected ${imageType} (preprocess.input)`);
  expectDims('tensors.image', image, uint8 ? [null, height, width, 3] : [null, 3, height, width]);
  if (roles.bulk) expectDims('tensors.bulk', meta(session.inputMetadata, roles.bulk), [null, manifest.genes!.input.length]);
  if (roles.prediction && manifest.genes) expectDims('genes.output', meta(session.outputMetadata, roles.prediction), [null, manifest.genes.output.length]);
  if (roles.embedding) {
    const m = meta(session.outputMetadata, roles.embedding);
    if (manifest.embedding_dim === undefined) fail('embedding_dim', 'required for a model with an embedding output');
    expectDims('embedding_dim', m, [null, manifest.embedding_dim!]);
  }
  if (roles.mask) {
    const m = meta(session.outputMetadata, roles.mask);
    const rank = m?.shape?.length;
    if (rank !== undefined && rank !== 3 && rank !== 4) fail('tensors.mask', `"${roles.mask}" has rank ${rank}, expected [N, H, W] or [N, 1, H, W]`);
    if (m?.type === 'float32' && manifest.mask_threshold === undefined) fail('mask_threshold', `required because "${roles.mask}" is float32`);
  }
}
