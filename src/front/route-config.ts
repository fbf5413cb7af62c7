// The route config that marks a model endpoint, so the usage and metrics hooks know what they
// observe and how each request ended, and the endpoints each model's routes defined (for
// GET /api/models).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ShedOutcome, UsageEntry } from '../ipc/protocol.js';
import { errors } from '../lib/errors.js';
import { whenGone } from './response-gone.js';
import { wasReset } from './slow-clients.js';

export interface ModelRouteConfig {
  /** The model; absent where the path names it (`:model`, the Open Inference Protocol's). */
  name?: string;
  endpoint: UsageEntry['endpoint'];
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

/** The model request's route, its model named; undefined for other routes and for a path that
 *  names a model not served (no counter for every name a client tries). */
export function modelRoute(request: FastifyRequest): Required<ModelRouteConfig> | undefined {
  const route = request.routeOptions.config.model;
  const name = route?.name ?? (request.params as { model?: string } | undefined)?.model;
  return route && name && request.server.modelEndpoints.has(name) ? { ...route, name } : undefined;
}

export function endpointsOf(app: FastifyInstance, model: string): string[] {
  return app.modelEndpoints.get(model) ?? [];
}

/** How a model request was shed, from the error code it was answered with (a client that left
 *  before its answer: TILE_ERR_CANCELLED, 499; one the front let go of: TILE_ERR_CLIENT_TOO_SLOW,
 *  408). */
const SHED: Partial<Record<string, ShedOutcome>> = {
  TILE_ERR_DEADLINE: 'expired',
  TILE_ERR_QUEUE_FULL: 'refused',
  TILE_ERR_FRONT_BUSY: 'refused',
  TILE_ERR_CANCELLED: 'cancelled',
  TILE_ERR_CLIENT_TOO_SLOW: 'evicted',
};
export const shedOutcome = (code: string): ShedOutcome | undefined => SHED[code];

/** Calls `record` once per model request: when its response is done, with how it was shed if it
 *  was (expired, refused), or when its connection closed before the answer (its client left:
 *  cancelled, 499; the front reset it: evicted, 408), which fastify's onResponse never sees. */
export function onModelRequestDone(
  app: FastifyInstance,
  record: (
    request: FastifyRequest,
    reply: FastifyReply,
    route: Required<ModelRouteConfig>,
    status: number,
    shed: ShedOutcome | undefined,
  ) => void,
): void {
  // Recorded by onResponse; a response that never finishes is recorded when it is gone: one
  // queued behind another (HTTP pipelining) whose connection closed first had ended, never sent.
  const recorded = new WeakSet<FastifyReply>();
  app.addHook('onRequest', async (request, reply) => {
    const route = modelRoute(request);
    if (route)
      whenGone(request.raw, reply.raw, () => {
        if (recorded.has(reply) || reply.raw.writableFinished) return;
        const left = wasReset(reply.raw) ? errors.clientTooSlow() : errors.cancelled();
        record(request, reply, route, left.statusCode, shedOutcome(left.code));
      });
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = modelRoute(request);
    recorded.add(reply);
    if (route) record(request, reply, route, reply.statusCode, shedOutcome(String(reply.getHeader('x-error-code'))));
  });
}
