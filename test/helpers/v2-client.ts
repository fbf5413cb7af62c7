// A client of the Open Inference Protocol written from its published specification, not from the
// service's code: KServe's "Open Inference Protocol" REST API (kserve/open-inference-protocol,
// docs/predict-api/v2/required_api.md) and Triton's binary tensor data extension
// (server/docs/protocol/extension_binary_data.md). JSON tensors carry `data` flattened row-major;
// binary ones follow the JSON header, whose length is in Inference-Header-Content-Length, each
// input sized by its `binary_data_size` parameter; BYTES elements each have a 4-byte
// little-endian length before them.

export type Datatype = 'UINT8' | 'FP32' | 'FP64' | 'BYTES';

export interface Tensor {
  name: string;
  datatype: Datatype;
  shape: number[];
  /** Elements row-major: numbers, or Buffers for BYTES. */
  data: ArrayLike<number> | Buffer[];
}

export interface InferOptions {
  /** Send input tensors in binary (default: JSON). */
  binaryInputs?: boolean;
  /** Ask for every output in binary (binary_data_output). */
  binaryOutputs?: boolean;
  outputs?: string[];
  parameters?: Record<string, unknown>;
  id?: string;
}

export interface Answer {
  status: number;
  headers: Headers;
  json: Record<string, any>;
  /** Output name to its elements (numbers; Uint8Array for UINT8, Float32Array for FP32). */
  outputs: Map<string, { datatype: string; shape: number[]; values: ArrayLike<number> }>;
}

/** The bytes of a tensor's elements, little-endian; BYTES with a 4-byte length before each. */
export function tensorBytes(t: Tensor): Buffer {
  if (t.datatype === 'BYTES')
    return Buffer.concat((t.data as Buffer[]).flatMap((b) => [Buffer.from(Uint32Array.of(b.length).buffer), b]));
  if (t.datatype === 'UINT8') return Buffer.from(Uint8Array.from(t.data as ArrayLike<number>));
  const typed =
    t.datatype === 'FP32'
      ? Float32Array.from(t.data as ArrayLike<number>)
      : Float64Array.from(t.data as ArrayLike<number>);
  return Buffer.from(typed.buffer);
}

/** The JSON body and, for binary inputs, the bytes after it. */
export function inferBody(inputs: Tensor[], options: InferOptions = {}): { header: Buffer; binary: Buffer[] } {
  const binary: Buffer[] = [];
  const request = {
    ...(options.id !== undefined && { id: options.id }),
    ...((options.parameters || options.binaryOutputs) && {
      parameters: { ...options.parameters, ...(options.binaryOutputs && { binary_data_output: true }) },
    }),
    inputs: inputs.map((t) => {
      if (!options.binaryInputs)
        return {
          name: t.name,
          datatype: t.datatype,
          shape: t.shape,
          data:
            t.datatype === 'BYTES'
              ? (t.data as Buffer[]).map((b) => b.toString('base64'))
              : Array.from(t.data as ArrayLike<number>),
        };
      const bytes = tensorBytes(t);
      binary.push(bytes);
      return { name: t.name, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: bytes.length } };
    }),
    ...(options.outputs && {
      outputs: options.outputs.map((name) => ({
        name,
        ...(options.binaryOutputs && { parameters: { binary_data: true } }),
      })),
    }),
  };
  return { header: Buffer.from(JSON.stringify(request)), binary };
}

/** Reads a response: JSON, or a JSON header and binary outputs in the order of `outputs`. */
export async function readAnswer(response: Response): Promise<Answer> {
  const body = Buffer.from(await response.arrayBuffer());
  const length = response.headers.get('inference-header-content-length');
  const headerLength = length === null ? body.length : Number(length);
  const json = JSON.parse(body.subarray(0, headerLength).toString('utf8'));
  const outputs: Answer['outputs'] = new Map();
  let at = headerLength;
  for (const o of json.outputs ?? []) {
    let values: ArrayLike<number>;
    const size = o.parameters?.binary_data_size;
    if (size !== undefined) {
      const bytes = body.subarray(at, at + size);
      at += size;
      const copy = new Uint8Array(bytes).buffer;
      values =
        o.datatype === 'UINT8'
          ? new Uint8Array(copy)
          : o.datatype === 'FP32'
            ? new Float32Array(copy)
            : new Float64Array(copy);
    } else {
      values =
        o.datatype === 'UINT8'
          ? Uint8Array.from(o.data.flat(Infinity))
          : o.datatype === 'FP32'
            ? Float32Array.from(o.data.flat(Infinity))
            : Float64Array.from(o.data.flat(Infinity));
    }
    outputs.set(o.name, { datatype: o.datatype, shape: o.shape, values });
  }
  return { status: response.status, headers: response.headers, json, outputs };
}

export class V2Client {
  constructor(readonly url: string) {}

  get(path: string): Promise<Response> {
    return fetch(this.url + path);
  }

  /** POST /v2/models/{model}[/versions/{version}]/infer. */
  async infer(model: string, inputs: Tensor[], options: InferOptions & { version?: string } = {}): Promise<Answer> {
    const { header, binary } = inferBody(inputs, options);
    const path = `/v2/models/${model}${options.version ? `/versions/${options.version}` : ''}/infer`;
    return readAnswer(
      await this.post(
        path,
        Buffer.concat([header, ...binary]),
        binary.length || options.binaryOutputs ? { 'inference-header-content-length': String(header.length) } : {},
      ),
    );
  }

  post(path: string, body: Buffer, headers: Record<string, string> = {}): Promise<Response> {
    return fetch(this.url + path, {
      method: 'POST',
      headers: {
        'content-type': headers['inference-header-content-length'] ? 'application/octet-stream' : 'application/json',
        ...headers,
      },
      body,
    });
  }
}
