// Model outputs to answers, by the role the manifest gives each tensor, never by its array type:
// a mask becomes 0/1 bytes, a prediction or embedding becomes numbers (whatever the dtype: a
// uint8 prediction is integers 0..255, int64 becomes Number, float16 is decoded). Shapes are
// checked against the role, so a misfit names the manifest field instead of a wrong answer.
import type { Manifest } from '../model-package/manifest.js';
import { FLOAT_TYPES, PackageError } from '../model-package/model-package.js';
import type { Numbers } from '../ipc/protocol.js';
import type { WireTensor } from './session-thread.js';
import { float16ToFloat32 } from './float16.js';

type OutputRole = 'mask' | 'prediction' | 'embedding';

/** The tensor's values as JS numbers: float32 and float64 as they are, float16 decoded, integers
 *  widened to float64 (exact up to 2^53, so int64 too in practice). */
export function numbersOf(t: WireTensor): Numbers {
  if (t.type === 'float32' || t.type === 'float64') return t.data as Numbers;
  if (t.type === 'float16') return float16ToFloat32(t.data as Uint16Array);
  const data = t.data as ArrayLike<number | bigint>;
  const out = new Float64Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = Number(data[i]);
  return out;
}

/** Throws a PackageError naming tensors.<role> when an output does not fit its role for a batch
 *  of n tiles (at warm-up, this refuses the package before it serves). */
export function checkOutputShape(manifest: Manifest, role: OutputRole, t: WireTensor, n: number): void {
  const name = manifest.tensors[role]!;
  const dims = t.dims;
  const { width, height } = manifest.tile;
  const per = dims.slice(1).reduce((a, b) => a * b, 1);
  const fail = (expected: string) => {
    throw new PackageError(
      'TILE_ERR_PACKAGE_OUTPUT_SHAPE',
      `${manifest.name}: tensors.${role}: "${name}" has shape [${dims.join(', ')}] for a batch of ${n} ${width}x${height} tiles, expected ${expected}`,
    );
  };
  if (dims[0] !== n) fail(`the batch (${n}) as dimension 0`);
  if (role === 'mask') {
    const channels = dims.length === 4 ? dims[1] : 1;
    const fits = (dims.length === 3 || dims.length === 4) && dims.at(-2) === height && dims.at(-1) === width;
    if (!fits)
      fail(`[N, ${height}, ${width}], [N, 1, ${height}, ${width}] or [N, C, ${height}, ${width}] with mask_channel`);
    if (channels > 1 && !manifest.mask_channel)
      fail(`one channel, or mask_channel to say which of the ${channels} is tissue`);
    if (manifest.mask_channel && manifest.mask_channel.index >= channels)
      fail(`more than mask_channel.index (${manifest.mask_channel.index}) channels`);
  }
  if (role === 'embedding' && per !== manifest.embedding_dim)
    fail(`embedding_dim (${manifest.embedding_dim}) values per tile`);
  if (role === 'prediction' && manifest.genes && per !== manifest.genes.output.length)
    fail(`one value per output gene (${manifest.genes.output.length})`);
}

export interface Mask {
  mask: Uint8Array;
  tissueFraction: number;
}

/** The mask output with float16 and 64-bit integer data as numbers, once per batch; other
 *  dtypes index as numbers as they are (no copy of a uint8 mask). */
export function maskTensor(t: WireTensor): WireTensor {
  return t.type === 'float16' || t.type === 'int64' || t.type === 'uint64' ? { ...t, data: numbersOf(t) } : t;
}

/** Tile i's 0/1 mask (of a maskTensor), in one pass. One channel: tissue where value > mask_threshold (floats) or
 *  value != 0 (integers, bool). Class channels: tissue where mask_channel.index wins the argmax
 *  (first maximum, as torch.argmax) or exceeds the threshold. */
export function maskOf(manifest: Manifest, t: WireTensor, i: number): Mask {
  const plane = manifest.tile.width * manifest.tile.height;
  const channels = t.dims.length === 4 ? t.dims[1] : 1;
  const values = t.data as ArrayLike<number>;
  const base = i * channels * plane;
  const isFloat = FLOAT_TYPES.includes(t.type);
  const threshold = isFloat ? (manifest.mask_threshold ?? 0.5) : 0;
  const rule = manifest.mask_channel?.rule ?? 'threshold';
  const k = manifest.mask_channel?.index ?? 0;
  const mask = new Uint8Array(plane);
  let tissue = 0;
  for (let p = 0; p < plane; p++) {
    const v = values[base + k * plane + p];
    let on: boolean;
    if (rule === 'threshold') on = isFloat ? v > threshold : v !== 0;
    else {
      on = true;
      for (let c = 0; c < channels && on; c++) {
        const w = values[base + c * plane + p];
        on = c < k ? v > w : c === k || v >= w;
      }
    }
    mask[p] = on ? 1 : 0;
    tissue += mask[p];
  }
  return { mask, tissueFraction: plane ? tissue / plane : 0 };
}

/** Row i of a batch of n, as numbers. */
export function rowOf(values: Numbers, n: number, i: number): Numbers {
  const size = values.length / n;
  return values.slice(i * size, (i + 1) * size);
}
