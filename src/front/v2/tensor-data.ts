// Tensor data as the Open Inference Protocol carries it, whatever the transport: typed values
// (a JSON body's `data`, gRPC's InferTensorContents) or raw bytes (the binary extension's, gRPC's
// raw_input_contents): elements row-major, little-endian, and for BYTES each element behind its
// 4-byte little-endian length. Readers check that the data holds exactly what the shape says.
import { errors } from '../../lib/errors.js';

/** An input's data: typed values (numbers, a JS array's or a typed array's; strings or Buffers for
 *  BYTES), or raw bytes. */
export type TensorData = { values: ArrayLike<unknown> } | { raw: Buffer };

export type Parameters = Record<string, unknown>;

export interface InputTensor {
  name: string;
  datatype: string;
  shape: number[];
  parameters?: Parameters;
  data: TensorData;
}

export type OutputDatatype = 'UINT8' | 'FP32' | 'FP64';

export interface OutputTensor {
  name: string;
  datatype: OutputDatatype;
  shape: number[];
  data: Uint8Array | Float32Array | Float64Array;
}

/** Bytes per element of the protocol's fixed-size datatypes. */
export const ELEMENT_BYTES: Record<string, number> = {
  BOOL: 1,
  UINT8: 1,
  UINT16: 2,
  UINT32: 4,
  UINT64: 8,
  INT8: 1,
  INT16: 2,
  INT32: 4,
  INT64: 8,
  FP16: 2,
  FP32: 4,
  FP64: 8,
  BF16: 2,
};
export const DATATYPES = [...Object.keys(ELEMENT_BYTES), 'BYTES'];

export const elements = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

const invalid = (input: string, what: string) => errors.v2Invalid(`input '${input}': ${what}`);

/** Whether `shape` is a list of non-negative integers. */
export const validShape = (shape: readonly number[]): boolean => shape.every((d) => Number.isSafeInteger(d) && d >= 0);

/** The bytes of a UINT8 tensor: raw as sent, or values each an integer 0..255. */
export function uint8Data(t: InputTensor): Buffer {
  const count = elements(t.shape);
  if ('raw' in t.data) {
    if (t.data.raw.length !== count)
      throw invalid(
        t.name,
        `shape [${t.shape.join(', ')}] holds ${count} UINT8 elements (${count} bytes), the data has ${t.data.raw.length} bytes`,
      );
    return t.data.raw;
  }
  const { values } = t.data;
  if (values.length !== count)
    throw invalid(t.name, `shape [${t.shape.join(', ')}] holds ${count} elements, data has ${values.length}`);
  // gRPC's uint_contents of bytes (tensor-contents.ts), each 0..255 by its type.
  if (values instanceof Uint8Array) return Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  const out = Buffer.allocUnsafe(count);
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 255)
      throw invalid(t.name, `element ${i} is ${JSON.stringify(v)}, expected an integer from 0 to 255 (UINT8)`);
    out[i] = v;
  }
  return out;
}

/** The numbers of an FP32 or FP64 tensor, each finite. */
export function floatData(t: InputTensor): number[] {
  const count = elements(t.shape);
  let out: number[];
  if ('raw' in t.data) {
    const size = ELEMENT_BYTES[t.datatype];
    const { raw } = t.data;
    if (raw.length !== count * size)
      throw invalid(
        t.name,
        `shape [${t.shape.join(', ')}] holds ${count} ${t.datatype} elements (${count * size} bytes), the data has ${raw.length} bytes`,
      );
    out = Array.from({ length: count }, (_, i) => (size === 4 ? raw.readFloatLE(i * 4) : raw.readDoubleLE(i * 8)));
  } else {
    if (t.data.values.length !== count)
      throw invalid(t.name, `shape [${t.shape.join(', ')}] holds ${count} elements, data has ${t.data.values.length}`);
    const { values } = t.data;
    out = Array.isArray(values) ? values : Array.from(values as ArrayLike<number>);
  }
  const bad = out.findIndex((v) => typeof v !== 'number' || !Number.isFinite(v));
  if (bad >= 0)
    throw invalid(
      t.name,
      // JSON writes NaN and Infinity as null: raw data can hold them.
      `element ${bad} is ${typeof out[bad] === 'number' ? out[bad] : JSON.stringify(out[bad])}, expected a finite number (${t.datatype})`,
    );
  if (t.datatype !== 'FP32') return out;
  // A finite double may be past float32's range: 1e39 became Infinity, and a 200 of NaN
  // predictions (an attack session).
  const rounded = out.map(Math.fround);
  const over = rounded.findIndex((v) => !Number.isFinite(v));
  if (over >= 0) throw invalid(t.name, `element ${over} is ${out[over]}, past FP32's range (3.4e38)`);
  return rounded;
}

/** The elements of a BYTES tensor: raw, each behind its 4-byte little-endian length; or values,
 *  each a Buffer (gRPC's bytes_contents) or base64 text (JSON has no bytes). */
export function bytesData(t: InputTensor, fromText: (text: string, index: number) => Buffer): Buffer[] {
  const count = elements(t.shape);
  if ('values' in t.data) {
    const { values } = t.data;
    if (values.length !== count)
      throw invalid(t.name, `shape [${t.shape.join(', ')}] holds ${count} elements, data has ${values.length}`);
    return Array.from(values, (v, i) => {
      if (Buffer.isBuffer(v)) return v;
      if (typeof v === 'string') return fromText(v, i);
      throw invalid(t.name, `element ${i} is ${JSON.stringify(v)}, expected a string (BYTES)`);
    });
  }
  const { raw } = t.data;
  const out: Buffer[] = [];
  let at = 0;
  while (at < raw.length) {
    // Past the shape's count the data is wrong whatever follows: said now, not after reading
    // millions of empty elements (16 MB of zeros are 4 million of them).
    if (out.length === count)
      throw invalid(t.name, `shape [${t.shape.join(', ')}] holds ${count} BYTES elements, the data has more`);
    if (at + 4 > raw.length)
      throw invalid(
        t.name,
        `BYTES element ${out.length} has a ${raw.length - at}-byte length prefix at byte ${at}, expected 4 bytes (uint32 little-endian)`,
      );
    const length = raw.readUInt32LE(at);
    if (at + 4 + length > raw.length)
      throw invalid(
        t.name,
        `BYTES element ${out.length} declares ${length} bytes at byte ${at}, past the ${raw.length} bytes of the data`,
      );
    out.push(raw.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  if (out.length !== count)
    throw invalid(t.name, `shape [${t.shape.join(', ')}] holds ${count} BYTES elements, the data has ${out.length}`);
  return out;
}

/** An output's elements as raw little-endian bytes (this host is little-endian: x86, ARM). */
export const rawBytes = (t: OutputTensor): Buffer => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
