// The HTTP contract's bodies (spec section 2), as TypeBox schemas: the one source of request
// validation, TypeScript types and the OpenAPI document.
import { Type, type Static } from 'typebox';
import type { PredictMode } from './endpoints.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T, description: string) =>
  Type.Optional(Type.Union([schema, Type.Null()], { description }));

/** Integers a JSON number holds exactly: beyond 2^53 one would be echoed as another (...992 for
 *  ...993, 1e+23), so it is refused instead. */
const SAFE = { minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER };

export const TileRequest = Type.Object(
  {
    image_data: Type.String({ description: 'Base64-encoded PNG tile' }),
    slide_name: Type.String({ description: 'Stem of the source slide filename' }),
    x: Type.Integer({ ...SAFE, description: 'Tile x-coordinate in the slide' }),
    y: Type.Integer({ ...SAFE, description: 'Tile y-coordinate in the slide' }),
    width: Type.Integer({ minimum: 1, maximum: SAFE.maximum, description: 'Tile width in pixels' }),
    height: Type.Integer({ minimum: 1, maximum: SAFE.maximum, description: 'Tile height in pixels' }),
    patch_idx: Type.Integer({ ...SAFE, description: 'Index of this tile in the extraction plan' }),
    bulk_rna: Nullable(
      Type.Array(Type.Number()),
      'Bulk RNA counts, one per input gene of the model (see /api/metadata/{model}); prediction only',
    ),
    tissue_ratio: Nullable(Type.Number({ minimum: 0, maximum: 1 }), 'Fraction of tissue in the tile, from 0 to 1'),
    resolution: Nullable(Type.Number(), 'Extraction resolution in microns per pixel'),
  },
  { title: 'ModelRequest' },
);
export type TileRequest = Static<typeof TileRequest>;
/** Every field of a tile request but the image, wherever they were sent (JSON body or query). */
export type TileFields = Omit<TileRequest, 'image_data'>;

export const TileResponse = Type.Object(
  {
    output: Type.Array(Type.Number(), {
      description:
        'Model output: 0/1 mask (height x width, row-major), predicted expression per output gene, or the embedding',
    }),
    slide_name: Type.String(),
    x: Type.Integer(),
    y: Type.Integer(),
    width: Type.Integer(),
    height: Type.Integer(),
    patch_idx: Type.Integer(),
    tissue_ratio: Nullable(
      Type.Number(),
      'Echo of the request value; for tissue-seg without one, the tissue fraction of the mask',
    ),
    resolution: Nullable(Type.Number(), 'Echo of the request value'),
    embedding: Nullable(Type.Array(Type.Number()), 'The embedding, in prediction_with_embedding mode only'),
  },
  { title: 'ModelResponse' },
);

export const ValidationError = Type.Object(
  {
    loc: Type.Array(Type.Union([Type.String(), Type.Integer()])),
    msg: Type.String(),
    type: Type.String(),
    ctx: Type.Optional(Type.Object({}, { additionalProperties: true })),
    input: Type.Optional(Type.Unknown()),
  },
  { title: 'ValidationError' },
);
export const HTTPValidationError = Type.Object(
  { detail: Type.Optional(Type.Array(ValidationError)) },
  { title: 'HTTPValidationError' },
);
export const Loading = Type.Object(
  { status: Type.Literal('loading') },
  { title: 'Loading', description: 'The model is starting or restarting; retry after Retry-After seconds' },
);
export const ErrorDetail = Type.Object({ detail: Type.String() }, { title: 'ErrorDetail' });

/** The query of POST /api/predict/<model>, offering the model's modes (predictModes). */
export const predictQuery = (modes: PredictMode[]) =>
  Type.Object({
    mode: Type.Optional(
      Type.Enum(modes, {
        default: 'prediction',
        description:
          modes.length > 1
            ? 'prediction_with_embedding also returns the embedding of the same forward pass'
            : 'this model has one mode',
      }),
    ),
  });
export const PredictQuery = predictQuery(['prediction', 'prediction_with_embedding']);
export type PredictQuery = Static<typeof PredictQuery>;

export const ModelMetadata = Type.Object(
  {
    model: Type.String(),
    version: Type.String(),
    tasks: Type.Array(Type.String()),
    tile: Type.Object({
      width: Type.Integer(),
      height: Type.Integer(),
      mpp: Type.Number(),
      mpp_tolerance: Type.Number(),
    }),
    input_genes: Type.Optional(Type.Array(Type.String())),
    output_genes: Type.Optional(Type.Array(Type.String())),
    gene_panel: Type.Optional(Type.String()),
    bulk_transform: Type.Optional(Type.String()),
    embedding_dim: Type.Optional(Type.Integer()),
    trained: Type.Boolean(),
    provenance: Type.String(),
    description: Type.String(),
    licence: Type.String(),
    sha256: Type.String(),
  },
  { title: 'ModelMetadata' },
);
