// The model package manifest (models/<name>/manifest.json): the single description of what a
// model takes, which ONNX tensor plays which role, and how its weights were made.
import { Type, type Static } from 'typebox';
import { MAX_BATCH } from '../lib/batch-bound.js';
import { MAX_TILE_SIDE } from '../lib/tile-bound.js';

// Closed sets are enums, not unions of literals, so a wrong value is reported once with the
// allowed values (manifest-errors.ts) instead of once per alternative.
export const Task = Type.Enum(['segmentation', 'prediction', 'embedding']);
export type Task = Static<typeof Task>;

export const BulkTransform = Type.Enum(['none', 'log1p', 'log1p_cp10k'], {
  description: 'Applied to bulk_rna before the bulk tensor: log1p_cp10k = log1p(counts / sum(counts) * 1e4).',
});
export type BulkTransform = Static<typeof BulkTransform>;

const Name = Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$' });
export const ImageInput = Type.Enum(['float32', 'float16', 'uint8']);
export type ImageInput = Static<typeof ImageInput>;
const ChannelOrder = Type.Enum(['RGB', 'BGR']);
export type ChannelOrder = Static<typeof ChannelOrder>;
/** Per-channel values: named channels (always unambiguous), or an array in R, G, B order, which
 *  the loader accepts only with channel_order RGB: with BGR an array invites the RGB/BGR mix-up. */
export const ChannelValues = Type.Union(
  [
    Type.Object(
      { R: Type.Number(), G: Type.Number(), B: Type.Number() },
      { additionalProperties: false, description: '{"R": r, "G": g, "B": b}' },
    ),
    Type.Array(Type.Number(), { minItems: 3, maxItems: 3, description: '[r, g, b] (channel_order RGB only)' }),
  ],
  { description: 'Per channel, named {"R", "G", "B"}; an array [r, g, b] only with channel_order RGB' },
);
export type ChannelValues = Static<typeof ChannelValues>;
export const MaskRule = Type.Enum(['argmax', 'threshold']);

export const Manifest = Type.Object({
  name: Name,
  version: Type.String({ minLength: 1 }),
  description: Type.String(),
  license: Type.String({ minLength: 1 }),
  tasks: Type.Array(Task, { minItems: 1, uniqueItems: true }),
  tile: Type.Object({
    width: Type.Integer({ minimum: 1, maximum: MAX_TILE_SIDE }),
    height: Type.Integer({ minimum: 1, maximum: MAX_TILE_SIDE }),
    mpp: Type.Number({ exclusiveMinimum: 0 }),
    /** Relative tolerance on `resolution`: 0.1 accepts mpp +-10%. */
    mpp_tolerance: Type.Number({ minimum: 0 }),
  }),
  /** How pixels become the image tensor. */
  preprocess: Type.Object({
    /** float32 or float16: image [N, 3, height, width], pixel v (0..255) of channel c as
     *  (v * scale - mean[c]) / std[c]; omitted: the graph's float type. uint8: image
     *  [N, height, width, 3], the decoded bytes as they are; the graph normalizes. */
    input: Type.Optional(ImageInput),
    scale: Type.Optional(Type.Number()),
    mean: Type.Optional(ChannelValues),
    std: Type.Optional(ChannelValues),
    channel_order: ChannelOrder,
  }),
  /** ONNX tensor name for each role (image and bulk inputs; mask, prediction, embedding outputs). */
  tensors: Type.Object({
    image: Type.String(),
    bulk: Type.Optional(Type.String()),
    mask: Type.Optional(Type.String()),
    prediction: Type.Optional(Type.String()),
    embedding: Type.Optional(Type.String()),
  }),
  /** For float mask outputs (probabilities or logits): a pixel is tissue when value > threshold.
   *  Integer and bool masks need none: a pixel is tissue when its value is not 0. */
  mask_threshold: Type.Optional(Type.Number()),
  /** For a class-channel mask [N, C, H, W] with C > 1: the tissue channel, and whether a pixel is
   *  tissue when that channel wins the argmax over channels or when it exceeds mask_threshold. */
  mask_channel: Type.Optional(Type.Object({ index: Type.Integer({ minimum: 0 }), rule: MaskRule })),
  genes: Type.Optional(
    Type.Object({
      panel: Type.String(),
      input: Type.Array(Type.String()),
      output: Type.Array(Type.String()),
      bulk_transform: BulkTransform,
    }),
  ),
  embedding_dim: Type.Optional(Type.Integer({ minimum: 1 })),
  batch: Type.Object({ max: Type.Integer({ minimum: 1, maximum: MAX_BATCH }) }),
  /** Inference runs on a zero tile before the worker reports ready (as Triton's model_warmup). */
  warmup: Type.Optional(Type.Object({ iterations: Type.Integer({ minimum: 0 }) })),
  /** What `npm run package` read from model.onnx, per tensor "dtype[dims]"; checked at load. */
  graph: Type.Optional(
    Type.Object({
      inputs: Type.Record(Type.String(), Type.String()),
      outputs: Type.Record(Type.String(), Type.String()),
    }),
  ),
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

/** mean or std in the image tensor's channel order. Arrays are R, G, B (the loader refuses them
 *  with BGR), named values are placed by name. */
export function inTensorOrder(values: ChannelValues, order: ChannelOrder): number[] {
  if (Array.isArray(values)) return values;
  return order === 'RGB' ? [values.R, values.G, values.B] : [values.B, values.G, values.R];
}
