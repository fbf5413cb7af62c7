// A small ONNX graph writer: enough of the format to describe the shipped models as real
// ONNX files (opset 17), byte-for-byte reproducible, without Python or PyTorch.
import onnxProto from 'onnx-proto';
import type { onnx } from 'onnx-proto';

const proto = onnxProto.onnx;

/** ONNX TensorProto element types (the ones exports commonly carry). */
export const DType = { FLOAT: 1, UINT8: 2, INT32: 6, INT64: 7, BOOL: 9, FLOAT16: 10, DOUBLE: 11 } as const;
export type DTypeId = (typeof DType)[keyof typeof DType];
export type Dim = number | string;

export type Attr = { i: number } | { f: number } | { ints: number[] } | { floats: number[] } | { s: string };

export const int = (i: number): Attr => ({ i });
export const float = (f: number): Attr => ({ f });
export const ints = (v: number[]): Attr => ({ ints: v });

function attribute(name: string, value: Attr): onnx.IAttributeProto {
  const T = proto.AttributeProto.AttributeType;
  if ('i' in value) return { name, type: T.INT, i: value.i };
  if ('f' in value) return { name, type: T.FLOAT, f: value.f };
  if ('ints' in value) return { name, type: T.INTS, ints: value.ints };
  if ('floats' in value) return { name, type: T.FLOATS, floats: value.floats };
  return { name, type: T.STRING, s: new TextEncoder().encode(value.s) };
}

function valueInfo(name: string, elemType: DTypeId, dims: Dim[]): onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType,
        shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

export interface ExternalDataOptions {
  /** File name, relative to the .onnx file, that receives large initializers. */
  location: string;
  /** Initializers of at least this many bytes go to the external file. */
  minBytes: number;
}

export interface SerializedModel {
  model: Uint8Array;
  externalData?: { location: string; bytes: Uint8Array };
}

export class Graph {
  private readonly nodes: onnx.INodeProto[] = [];
  private readonly initializers: { name: string; dims: number[]; type: DTypeId; bytes: Uint8Array }[] = [];
  private readonly inputs: onnx.IValueInfoProto[] = [];
  private readonly outputs: onnx.IValueInfoProto[] = [];
  private counter = 0;

  constructor(private readonly name: string) {}

  input(name: string, type: DTypeId, dims: Dim[]): string {
    this.inputs.push(valueInfo(name, type, dims));
    return name;
  }

  output(name: string, type: DTypeId, dims: Dim[]): void {
    this.outputs.push(valueInfo(name, type, dims));
  }

  /** Adds a float32 (or int64) constant tensor and returns its name. */
  constant(prefix: string, data: Float32Array | BigInt64Array, dims: number[]): string {
    const name = `${prefix}_${this.counter++}`;
    const type = data instanceof Float32Array ? DType.FLOAT : DType.INT64;
    const bytes = new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
    this.initializers.push({ name, dims, type, bytes });
    return name;
  }

  scalar(prefix: string, value: number): string {
    return this.constant(prefix, Float32Array.of(value), []);
  }

  shape(prefix: string, dims: number[]): string {
    return this.constant(prefix, BigInt64Array.from(dims.map(BigInt)), [dims.length]);
  }

  /** Appends a node; returns the name of its (first) output, or `out` when given. */
  op(opType: string, inputs: string[], attrs: Record<string, Attr> = {}, out?: string): string {
    const output = out ?? `${opType.toLowerCase()}_${this.counter++}`;
    this.nodes.push({
      opType,
      name: `${opType}_${this.counter++}`,
      input: inputs,
      output: [output],
      attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)),
    });
    return output;
  }

  serialize(
    meta: { docString: string; metadata: Record<string, string> },
    external?: ExternalDataOptions,
  ): SerializedModel {
    const chunks: Uint8Array[] = [];
    let offset = 0;
    const initializer = this.initializers.map((t): onnx.ITensorProto => {
      const base = { name: t.name, dims: t.dims, dataType: t.type };
      if (!external || t.bytes.byteLength < external.minBytes) return { ...base, rawData: t.bytes };
      // ONNX external data: offsets aligned to 4 KiB so the runtime may map them.
      const pad = (4096 - (offset % 4096)) % 4096;
      if (pad) chunks.push(new Uint8Array(pad));
      offset += pad;
      chunks.push(t.bytes);
      const entry = {
        ...base,
        dataLocation: proto.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: external.location },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(t.bytes.byteLength) },
        ],
      };
      offset += t.bytes.byteLength;
      return entry;
    });
    const model = proto.ModelProto.encode({
      irVersion: 8,
      producerName: 'tile-inference-service/model-build',
      producerVersion: '1',
      docString: meta.docString,
      opsetImport: [{ domain: '', version: 17 }],
      metadataProps: Object.entries(meta.metadata).map(([key, value]) => ({ key, value })),
      graph: { name: this.name, node: this.nodes, initializer, input: this.inputs, output: this.outputs },
    }).finish();
    if (!external || chunks.length === 0) return { model };
    return { model, externalData: { location: external.location, bytes: Buffer.concat(chunks) } };
  }
}

/** Deterministic weights: mulberry32 uniform, Box-Muller normal. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  uniform(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    const u = Math.max(this.uniform(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.uniform());
  }
  /** He-normal weights for a layer with `fanIn` inputs. */
  he(count: number, fanIn: number): Float32Array {
    const std = Math.sqrt(2 / fanIn);
    return Float32Array.from({ length: count }, () => this.normal() * std);
  }
}
