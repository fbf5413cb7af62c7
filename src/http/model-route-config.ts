// The route config that marks a model endpoint, so the usage and metrics hooks know what they
// observe, and the endpoints each model has (for GET /api/models and --check-config).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Task } from '../model-package/manifest.js';

export interface ModelRouteConfig {
  name: string;
  endpoint: 'predict' | 'embed';
}

declare module 'fastify' {
  interface FastifyContextConfig {
    model?: ModelRouteConfig;
  }
  interface FastifyInstance {
    /** "METHOD path" of every endpoint of each model, filled as model routes are defined. */
    modelEndpoints: Map<string, string[]>;
  }
}

export function modelRoute(request: FastifyRequest): ModelRouteConfig | undefined {
  return request.routeOptions.config.model;
}

export function endpointsOf(app: FastifyInstance, model: string): string[] {
  return app.modelEndpoints.get(model) ?? [];
}

/** The endpoints a package's tasks give a model (`METHOD path`), in the order they are defined:
 *  the one mapping of tasks to routes, for the routes themselves, /api/models and --check-config. */
export function endpointsFor(model: string, tasks: readonly Task[]): string[] {
  return [
    ...(tasks.includes('prediction') || tasks.includes('segmentation') ? [`POST /api/predict/${model}`] : []),
    ...(tasks.includes('embedding') ? [`POST /api/embed/${model}`] : []),
    `GET /api/metadata/${model}`,
  ];
}
