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
