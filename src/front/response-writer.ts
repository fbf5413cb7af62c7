// Writes a tile response as JSON text directly. A 512x512 mask is 262,144 numbers: a Buffer of
// "0,"/"1," bytes takes well under a millisecond where JSON.stringify of an array takes ~10 ms.
// Or, for a client that asks for it (Accept: application/octet-stream), the output tensor's bytes
// as they are, its dtype and shape beside: the client then parses nothing.
import type { TileFields } from '../contract/schemas.js';
import type { Numbers, TileOutput } from '../ipc/protocol.js';

const COMMA = 0x2c;
const ZERO = 0x30;

const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
/** "0," and "1," as one 16-bit store each. */
const PAIR = LITTLE_ENDIAN
  ? [ZERO | (COMMA << 8), (ZERO + 1) | (COMMA << 8)]
  : [(ZERO << 8) | COMMA, ((ZERO + 1) << 8) | COMMA];

/** A 0/1 mask as a JSON array. */
export function maskJson(mask: Uint8Array): Buffer {
  if (mask.length === 0) return Buffer.from('[]');
  // Pairs start at byte 2 so the 16-bit view is aligned; '[' goes in byte 1.
  const bytes = new ArrayBuffer(mask.length * 2 + 2);
  const pairs = new Uint16Array(bytes, 2, mask.length);
  for (let i = 0; i < mask.length; i++) pairs[i] = PAIR[mask[i] ? 1 : 0];
  const out = Buffer.from(bytes, 1);
  out[0] = 0x5b;
  out[out.length - 1] = 0x5d;
  return out;
}

/** Numbers as a JSON array; non-finite values become null, as JSON.stringify writes them. */
export function numbersJson(values: Numbers): string {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) return JSON.stringify(Array.from(values));
  }
  return `[${values.join(',')}]`;
}

export interface TileOutcome {
  output: TileOutput;
  embedding: Numbers | null;
  tissueRatio: number | null;
}

/** The ModelResponse for a request: output, the echoed tile fields, then embedding. */
export function tileResponseJson(request: TileFields, outcome: TileOutcome): Buffer {
  const output = outcome.output.role === 'mask' ? maskJson(outcome.output.mask) : numbersJson(outcome.output.values);
  const echo = JSON.stringify({
    slide_name: request.slide_name,
    x: request.x,
    y: request.y,
    width: request.width,
    height: request.height,
    patch_idx: request.patch_idx,
    tissue_ratio: outcome.tissueRatio,
    resolution: request.resolution ?? null,
  });
  const embedding = outcome.embedding ? numbersJson(outcome.embedding) : 'null';
  return Buffer.concat([
    Buffer.from('{"output":'),
    typeof output === 'string' ? Buffer.from(output) : output,
    Buffer.from(`,${echo.slice(1, -1)},"embedding":${embedding}}`),
  ]);
}

/** The answer an Accept header chooses: the output tensor, JSON, or neither (406). Media types
 *  are matched case-insensitively with their q-values; the tensor wins a tie with JSON only when
 *  named (absent, its quality is 0; * / * and application/* give JSON theirs). Where the tensor
 *  is impossible (`tensor` false: two tensors), JSON when the header admits it at all. */
export function negotiate(accept: string | undefined, tensor = true): 'tensor' | 'json' | null {
  if (!accept?.trim()) return 'json';
  let octet = 0;
  let json = 0;
  for (const part of accept.split(',')) {
    const [type, ...params] = part.split(';').map((p) => p.trim().toLowerCase());
    const q = Number(params.find((p) => p.startsWith('q='))?.slice(2) ?? 1);
    const quality = Number.isFinite(q) ? Math.min(Math.max(q, 0), 1) : 0;
    if (type === 'application/octet-stream') octet = Math.max(octet, quality);
    else if (type === 'application/json' || type === 'application/*' || type === '*/*') json = Math.max(json, quality);
  }
  if (tensor && octet > 0 && octet >= json) return 'tensor';
  if (json > 0) return 'json';
  // Asked for the tensor only, and it cannot be: 406. A header naming neither gets JSON.
  return octet > 0 ? null : 'json';
}

/** The output tensor of a binary response: a mask as uint8 [height, width], other outputs as
 *  their float type [n]; little-endian. */
export function outputTensor(
  output: TileOutput,
  height: number,
  width: number,
): { bytes: Buffer; dtype: string; shape: number[] } {
  if (output.role === 'mask')
    return {
      bytes: Buffer.from(output.mask.buffer, output.mask.byteOffset, output.mask.byteLength),
      dtype: 'uint8',
      shape: [height, width],
    };
  const { values } = output;
  const bytes = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  const wide = values instanceof Float64Array;
  return {
    bytes: LITTLE_ENDIAN ? bytes : wide ? Buffer.from(bytes).swap64() : Buffer.from(bytes).swap32(),
    dtype: wide ? 'float64' : 'float32',
    shape: [values.length],
  };
}
