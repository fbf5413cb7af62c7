// Route config that marks a model endpoint, so usage and metrics hooks know what they observe.
import type { FastifyRequest } from 'fastify';

export interface ModelRouteConfig {
  name: string;
  endpoint: 'predict' | 'embed';
}

declare module 'fastify' {
  interface FastifyContextConfig {
    model?: ModelRouteConfig;
  }
}

export function modelRoute(request: FastifyRequest): ModelRouteConfig | undefined {
  return request.routeOptions.config.model;
}
