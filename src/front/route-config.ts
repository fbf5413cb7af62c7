// The route config that marks a model endpoint, so the usage and metrics hooks know what they
// observe, and the endpoints each model's routes defined (for GET /api/models).
import type { FastifyInstance, FastifyRequest } from 'fastify';

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
