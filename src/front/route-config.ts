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

/** How a request whose answer was not sent whole is recorded, HTTP's or gRPC's: let go of by the
 *  front (`evicted`: 408, TILE_ERR_CLIENT_TOO_SLOW), or its client gone (499, TILE_ERR_CANCELLED). */
export function unanswered(evicted: boolean): { status: number; shed: ShedOutcome | undefined } {
  const left = evicted ? errors.clientTooSlow() : errors.cancelled();
  return { status: left.statusCode, shed: shedOutcome(left.code) };
}

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
  // Recorded once: when its response is done (onResponse), or gone before that, its connection
  // closed (a response queued behind another, HTTP pipelining, whose connection closed first had
  // ended, never sent; the 'close' of one finished may also come first, before the onResponse
  // hooks after a promise). Node finishes a response whose last write the reset of its
  // connection cancelled, as if it had been sent: one done on a connection the front reset was let
  // go of.
  const recorded = new WeakSet<FastifyReply>();
  const finished = new WeakSet<FastifyReply>();
  const done = (request: FastifyRequest, reply: FastifyReply, route: Required<ModelRouteConfig>, sent: boolean) => {
    if (recorded.has(reply)) return;
    recorded.add(reply);
    const reset = wasReset(request.raw);
    if (sent && !reset)
      return record(request, reply, route, reply.statusCode, shedOutcome(String(reply.getHeader('x-error-code'))));
    const { status, shed } = unanswered(reset);
    record(request, reply, route, status, shed);
  };
  app.addHook('onRequest', async (request, reply) => {
    const route = modelRoute(request);
    if (!route) return;
    reply.raw.once('finish', () => finished.add(reply));
    whenGone(request.raw, reply.raw, () => done(request, reply, route, finished.has(reply)));
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = modelRoute(request);
    // Also on the response's 'error'. Fastify's 'finish' listener runs before the one above.
    if (route) done(request, reply, route, true);
  });
}
