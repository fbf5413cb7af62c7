// The contract's endpoints per model: which paths a model package's tasks give it. The one
// mapping of tasks to routes, for the front's routes, /api/models, --check-config and clients.
import type { Task } from '../model-package/manifest.js';

/** The endpoints a package's tasks give a model (`METHOD path`), in the order they are defined:
 *  the one mapping of tasks to routes, for the routes themselves, /api/models and --check-config. */
export function endpointsFor(model: string, tasks: readonly Task[]): string[] {
  return [
    ...(tasks.includes('prediction') || tasks.includes('segmentation') ? [`POST /api/predict/${model}`] : []),
    ...(tasks.includes('embedding') ? [`POST /api/embed/${model}`] : []),
    `GET /api/metadata/${model}`,
  ];
}

/** The bodies a model endpoint takes: the contract's JSON (a base64 PNG in image_data), the PNG
 *  file itself, or the tile's raw pixels (uint8 RGB, row-major); the last two with the tile's
 *  fields in the query string. GET /api/models lists them per model, so clients can tell. */
export const TILE_BODY_TYPES = ['application/json', 'image/png', 'application/octet-stream'] as const;
export type TileBodyType = (typeof TILE_BODY_TYPES)[number];

export type PredictMode = 'prediction' | 'prediction_with_embedding';

/** The modes of a model's POST /api/predict: the embedding of the same forward pass where the
 *  model predicts and embeds (a segmentation model's mask comes alone). */
export function predictModes(tasks: readonly Task[]): PredictMode[] {
  return tasks.includes('prediction') && tasks.includes('embedding') && !tasks.includes('segmentation')
    ? ['prediction', 'prediction_with_embedding']
    : ['prediction'];
}
