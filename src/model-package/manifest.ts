// The model package manifest (models/<name>/manifest.json): the single description of what a
// model takes, which ONNX tensor plays which role, and how its weights were made.
import { Type, type Static } from 'typebox';

export const Task = Type.Union([Type.Literal('segmentation'), Type.Literal('prediction'), Type.Literal('embedding')]);
export type Task = Static<typeof Task>;

export const BulkTransform = Type.Union([Type.Literal('none'), Type.Literal('log1p'), Type.Literal('log1p_cp10k')], {
  description: 'Applied to bulk_rna before the bulk tensor: log1p_cp10k = log1p(counts / sum(counts) * 1e4).',
});
export type BulkTransform = Static<typeof BulkTransform>;

const Name = Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$' });
const Rgb = Type.Array(Type.Number(), { minItems: 3, maxItems: 3 });
const ChannelOrder = Type.Union([Type.Literal('RGB'), Type.Literal('BGR')]);

export const Manifest = Type.Object({
  name: Name,
  version: Type.String({ minLength: 1 }),
  description: Type.String(),
  license: Type.String({ minLength: 1 }),
  tasks: Type.Array(Task, { minItems: 1, uniqueItems: true }),
  tile: Type.Object({
    width: Type.Integer({ minimum: 1 }),
    height: Type.Integer({ minimum: 1 }),
    mpp: Type.Number({ exclusiveMinimum: 0 }),
    /** Relative tolerance on `resolution`: 0.1 accepts mpp +-10%. */
    mpp_tolerance: Type.Number({ minimum: 0 }),
  }),
  /** How pixels become the image tensor. */
  preprocess: Type.Union([
    Type.Object({
      /** float32 (default): image [N, 3, height, width], pixel v (0..255) as (v * scale - mean[c]) / std[c]. */
      input: Type.Optional(Type.Literal('float32')),
      scale: Type.Number(),
      mean: Rgb,
      std: Rgb,
      channel_order: ChannelOrder,
    }),
    Type.Object({
      /** uint8: image [N, height, width, 3], the decoded bytes as they are; the graph normalizes. */
      input: Type.Literal('uint8'),
      channel_order: ChannelOrder,
    }),
  ]),
  /** ONNX tensor name for each role (image and bulk inputs; mask, prediction, embedding outputs). */
  tensors: Type.Object({
    image: Type.String(),
    bulk: Type.Optional(Type.String()),
    mask: Type.Optional(Type.String()),
    prediction: Type.Optional(Type.String()),
    embedding: Type.Optional(Type.String()),
  }),
  /** For float mask outputs (probabilities or logits): a pixel is tissue when value > threshold. */
  mask_threshold: Type.Optional(Type.Number()),
  genes: Type.Optional(
    Type.Object({
      panel: Type.String(),
      input: Type.Array(Type.String()),
      output: Type.Array(Type.String()),
      bulk_transform: BulkTransform,
    }),
  ),
  embedding_dim: Type.Optional(Type.Integer({ minimum: 1 })),
  batch: Type.Object({ max: Type.Integer({ minimum: 1 }) }),
  /** Inference runs on a zero tile before the worker reports ready (as Triton's model_warmup). */
  warmup: Type.Optional(Type.Object({ iterations: Type.Integer({ minimum: 0 }) })),
  provenance: Type.Object({
    trained: Type.Boolean(),
    method: Type.String(),
    source: Type.Optional(Type.String()),
  }),
});
export type Manifest = Static<typeof Manifest>;

/** The output tensor role each task needs. */
export const taskOutput: Record<Task, 'mask' | 'prediction' | 'embedding'> = {
  segmentation: 'mask',
  prediction: 'prediction',
  embedding: 'embedding',
};
