// Layer helpers over Graph: the building blocks the shipped models are assembled from.
import { type Graph, type Rng, DType, int, ints, float } from './onnx-graph.js';

export function conv(
  g: Graph,
  rng: Rng,
  x: string,
  cin: number,
  cout: number,
  k: number,
  stride: number,
  relu = true,
): string {
  const w = g.constant('conv_w', rng.he(cout * cin * k * k, cin * k * k), [cout, cin, k, k]);
  const b = g.constant('conv_b', new Float32Array(cout), [cout]);
  const pad = stride === k ? 0 : Math.floor(k / 2);
  const y = g.op('Conv', [x, w, b], {
    kernel_shape: ints([k, k]),
    strides: ints([stride, stride]),
    pads: ints([pad, pad, pad, pad]),
  });
  return relu ? g.op('Relu', [y]) : y;
}

/** x [..., din] @ W [din, dout] + b, weights with the given standard deviation. */
export function linear(g: Graph, rng: Rng, x: string, din: number, dout: number, std = Math.sqrt(2 / din)): string {
  const w = g.constant(
    'fc_w',
    Float32Array.from({ length: din * dout }, () => rng.normal() * std),
    [din, dout],
  );
  const b = g.constant('fc_b', new Float32Array(dout), [dout]);
  return g.op('Add', [g.op('MatMul', [x, w]), b]);
}

export function layerNorm(g: Graph, x: string, dim: number): string {
  const scale = g.constant('ln_scale', new Float32Array(dim).fill(1), [dim]);
  const bias = g.constant('ln_bias', new Float32Array(dim), [dim]);
  return g.op('LayerNormalization', [x, scale, bias], { axis: int(-1), epsilon: float(1e-5) });
}

/** Unit-length rows, so embeddings compare by cosine similarity. */
export function l2normalize(g: Graph, x: string, out: string): string {
  const norm = g.op('ReduceL2', [x], { axes: ints([-1]), keepdims: int(1) });
  return g.op('Div', [x, g.op('Max', [norm, g.scalar('eps', 1e-6)])], {}, out);
}

/** A uint8 RGB tile [N, H, W, 3] as the float [N, 3, H, W] input of a network trained on
 *  (v / 255 - mean) / std: the normalization runs in ONNX Runtime instead of the worker's JS. */
export function normalizedImage(g: Graph, image: string, mean: number[], std: number[]): string {
  const nchw = g.op('Transpose', [g.op('Cast', [image], { to: int(DType.FLOAT) })], { perm: ints([0, 3, 1, 2]) });
  const scale = g.constant(
    'norm_scale',
    Float32Array.from(std, (s) => 1 / (255 * s)),
    [1, 3, 1, 1],
  );
  const shift = g.constant(
    'norm_shift',
    Float32Array.from(mean, (m, c) => -m / std[c]),
    [1, 3, 1, 1],
  );
  return g.op('Add', [g.op('Mul', [nchw, scale]), shift]);
}
