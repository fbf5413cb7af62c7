// An Open Inference Protocol request as the tiles the contract's routes would send: its inputs
// read and checked (names, datatypes, shapes, data), each tile held to the contract's rules
// (tile-checks.ts: size, resolution, bulk RNA, PNG header), and the answers put back together as
// output tensors of N rows. Transport-free: the REST plugin and the gRPC server both use it.
import type { InferResult, TileJob } from '../../ipc/protocol.js';
import type { Manifest, Task } from '../../model-package/manifest.js';
import { errors, ServiceError, type FieldError } from '../../lib/errors.js';
import { decodeBase64Strict } from '../../tile/base64.js';
import { checkTile } from '../tile-checks.js';
import { pngImage, rgbImage, type TileBody } from '../tile-image.js';
import { inputsOf, outputsOf, takesBulk, type OutputName } from './model-tensors.js';
import {
  bytesData,
  elements,
  floatData,
  uint8Data,
  validShape,
  type InputTensor,
  type OutputTensor,
  type Parameters,
} from './tensor-data.js';

export interface InferRequest {
  id?: string;
  parameters?: Parameters;
  inputs: InputTensor[];
  /** The outputs asked for; all of the model's when absent. */
  outputs?: { name: string; parameters?: Parameters }[];
}

export interface Plan {
  jobs: TileJob[];
  outputs: OutputName[];
}

const list = (names: string[]) => names.map((n) => `'${n}'`).join(', ');

/** Where the worker's field errors say the image was. */
const IMAGE_LOC = ['inputs', 'image'];

/** The input a contract field error is about. */
const inputOf = (loc: FieldError['loc']): string =>
  loc[1] === 'resolution' || loc[1] === 'bulk_rna' ? loc[1] : 'image';

/** A tile's field errors (the contract's checks, or the worker's decoding) as one protocol error. */
export function tileError(detail: FieldError[], tile: number): ServiceError {
  return errors.v2Invalid(
    detail
      .map(
        (d) =>
          `input '${inputOf(d.loc)}', tile ${tile}: ${d.msg.replace(/^Value error, /, '').replace(/\bimage_data\b/, 'the BYTES element')}`,
      )
      .join('; '),
  );
}

function readRequest(manifest: Manifest, request: InferRequest) {
  const accepted = inputsOf(manifest).map((i) => i.name);
  const byName = new Map<string, InputTensor>();
  for (const input of request.inputs) {
    if (!accepted.includes(input.name))
      throw errors.v2Invalid(`input '${input.name}': ${manifest.name} takes no such input, expected ${list(accepted)}`);
    if (byName.has(input.name)) throw errors.v2Invalid(`input '${input.name}' is given twice`);
    if (!validShape(input.shape))
      throw errors.v2Invalid(
        `input '${input.name}': shape [${input.shape.join(', ')}] should be non-negative integers`,
      );
    byName.set(input.name, input);
  }
  const image = byName.get('image');
  if (!image)
    throw errors.v2Invalid(
      `input 'image' is missing: ${manifest.name} takes UINT8 [N, ${manifest.tile.height}, ${manifest.tile.width}, 3] raw RGB tiles or BYTES [N] PNG files`,
    );
  return { image, bulk: byName.get('bulk_rna'), resolution: byName.get('resolution') };
}

/** The tiles' images, as the contract's body parsers would carry them. */
function images(manifest: Manifest, image: InputTensor) {
  const { width, height } = manifest.tile;
  const uint8 = image.datatype === 'UINT8';
  if (!uint8 && image.datatype !== 'BYTES')
    throw errors.v2Invalid(
      `input 'image' has datatype ${image.datatype}, expected UINT8 (raw RGB tiles [N, ${height}, ${width}, 3]) or BYTES (PNG files [N])`,
    );
  if (uint8 && (image.shape.length !== 4 || image.shape[3] !== 3))
    throw errors.v2Invalid(
      `input 'image': UINT8 shape [${image.shape.join(', ')}], expected [N, ${height}, ${width}, 3] (raw RGB tiles)`,
    );
  if (!uint8 && image.shape.length !== 1)
    throw errors.v2Invalid(
      `input 'image': BYTES shape [${image.shape.join(', ')}], expected [N] (one PNG file per tile)`,
    );
  // Before anything is made per tile: with a 0 in its shape, empty data fits any N, and
  // [100000000, 0, 224, 3] took a front past its heap limit (an attack session).
  const n = image.shape[0];
  const max = manifest.batch.max;
  if (n < 1 || n > max)
    throw errors.v2Invalid(
      `input 'image' holds ${n} tiles, expected 1 to ${max} (${manifest.name}'s batch.max) per request`,
    );
  if (uint8) {
    const [, h, w] = image.shape;
    const bytes = uint8Data(image);
    const per = h * w * 3;
    return {
      n,
      width: w,
      height: h,
      tiles: Array.from({ length: n }, (_, i) => rgbImage(bytes.subarray(i * per, (i + 1) * per))),
    };
  }
  const pngs = bytesData(image, (text, i) => {
    const decoded = decodeBase64Strict(text);
    if ('reason' in decoded)
      throw errors.v2Invalid(
        `input 'image', tile ${i}: a BYTES element in JSON is the PNG file in base64: ${decoded.reason}`,
      );
    return decoded.bytes;
  });
  return { n, width, height, tiles: pngs.map((png) => pngImage(png, 'image_data')) };
}

/** Per tile: N values from an FP32/FP64 input of shape [N, ...per], or null when absent. */
function rows(input: InputTensor | undefined, n: number, per: number | null, expected: string): number[][] | null {
  if (!input) return null;
  if (input.datatype !== 'FP32' && input.datatype !== 'FP64')
    throw errors.v2Invalid(`input '${input.name}' has datatype ${input.datatype}, expected FP32 (or FP64) ${expected}`);
  // `per` null: [N], one value a tile; else [N, per].
  const rank = per === null ? 1 : 2;
  if (input.shape.length !== rank || input.shape[0] !== n || elements(input.shape) !== n * (per ?? 1))
    throw errors.v2Invalid(
      `input '${input.name}': shape [${input.shape.join(', ')}], expected ${expected} with N = ${n}, the tiles of 'image'`,
    );
  const values = floatData(input);
  const width = per ?? 1;
  return Array.from({ length: n }, (_, i) => values.slice(i * width, (i + 1) * width));
}

/** The outputs asked for, and the task that gives them (prediction and embedding from one pass). */
function wanted(
  manifest: Manifest,
  request: InferRequest,
): { outputs: OutputName[]; task: Task; withEmbedding: boolean } {
  const served = outputsOf(manifest).map((o) => o.name);
  const outputs = (request.outputs?.map((o) => o.name) ?? served) as OutputName[];
  // Each output is answered once: a name repeated would have the answer repeated, as many times as a
  // small request cares to ask (20,000 embeddings in 570 kB of JSON answered with 68 MB).
  const seen = new Set<string>();
  for (const name of outputs) {
    if (seen.has(name)) throw errors.v2Invalid(`output '${name}' is asked for twice`);
    seen.add(name);
  }
  for (const name of outputs)
    if (!served.includes(name))
      throw errors.v2Invalid(`output '${name}': ${manifest.name} has no such output, expected ${list(served)}`);
  if (outputs.length === 0) throw errors.v2Invalid(`outputs is empty, expected some of ${list(served)}`);
  if (manifest.tasks.includes('segmentation')) return { outputs, task: 'segmentation', withEmbedding: false };
  if (outputs.includes('prediction'))
    return { outputs, task: 'prediction', withEmbedding: outputs.includes('embedding') };
  return { outputs, task: 'embedding', withEmbedding: false };
}

/** A decimal number as text (" 0.5", "5e-1"; not "0x1", "", " "). */
const DECIMAL = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;

/** Reads and checks a request against the model: a job per tile, or a TILE_ERR_V2_INVALID naming
 *  the input and what was expected. */
export function planJobs(manifest: Manifest, request: InferRequest, maxPixels: number): Plan {
  const { outputs, task, withEmbedding } = wanted(manifest, request);
  const input = readRequest(manifest, request);
  const { n, width, height, tiles } = images(manifest, input.image);
  const genes = manifest.genes?.input.length ?? 0;
  const usesBulk = task === 'prediction' && takesBulk(manifest);
  if (input.bulk && !takesBulk(manifest))
    throw errors.v2Invalid(`input 'bulk_rna': ${manifest.name} takes no bulk RNA`);
  const bulk = usesBulk ? rows(input.bulk, n, genes, `[N, ${genes}] (counts of ${manifest.name}'s input genes)`) : null;
  // A number; gRPC's parameters hold no floats, so text such as "0.5" too.
  const given = request.parameters?.resolution;
  const parameter = typeof given === 'string' && DECIMAL.test(given) ? Number(given) : given;
  if (parameter !== undefined && (typeof parameter !== 'number' || !Number.isFinite(parameter)))
    throw errors.v2Invalid(`parameter 'resolution' is ${JSON.stringify(given)}, expected a number (MPP)`);
  const resolution = rows(input.resolution, n, null, '[N] (MPP per tile)')?.map((r) => r[0]) ?? null;
  const jobs = tiles.map((image, i): TileJob => {
    const body = {
      width,
      height,
      image_data: image,
      resolution: resolution?.[i] ?? parameter,
      bulk_rna: bulk?.[i],
    } as TileBody;
    const checked = checkTile(body, manifest, usesBulk, maxPixels);
    if (checked.errors.length || !checked.image) throw tileError(checked.errors, i);
    return { task, withEmbedding, image: { ...checked.image, loc: IMAGE_LOC }, width, height, bulk: bulk?.[i] ?? null };
  });
  return { jobs, outputs };
}

/** The tiles' answers as the outputs asked for, N rows each; the first tile that failed is the
 *  answer instead (a PNG the worker could not decode is the request's fault: 400). */
export function assemble(
  manifest: Manifest,
  results: (InferResult | ServiceError)[],
  outputs: OutputName[],
): OutputTensor[] {
  const done = results.map((r, i) => {
    if (!(r instanceof ServiceError)) return r;
    throw r.code === 'TILE_ERR_VALIDATION' ? tileError(r.detail ?? [], i) : r;
  });
  const n = done.length;
  const declared = new Map(outputsOf(manifest).map((o) => [o.name, o]));
  return outputs.map((name): OutputTensor => {
    const { datatype } = declared.get(name)!;
    if (name === 'mask') {
      const { width, height } = manifest.tile;
      const data = new Uint8Array(n * width * height);
      done.forEach((r, i) => r.output.role === 'mask' && data.set(r.output.mask, i * width * height));
      return { name, datatype, shape: [n, height, width], data };
    }
    if (name === 'tissue_ratio')
      return { name, datatype, shape: [n], data: Float32Array.from(done, (r) => r.tissueFraction ?? 0) };
    const values = done.map((r) => (r.output.role === name ? r.output.values : r.embedding!));
    const per = values[0].length;
    const data = datatype === 'FP64' ? new Float64Array(n * per) : new Float32Array(n * per);
    values.forEach((v, i) => data.set(v, i * per));
    return { name, datatype, shape: [n, per], data };
  });
}
