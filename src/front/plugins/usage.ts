// Reports one usage entry per model request, after the response is sent or the client left, to
// the service's one usage log (kept by the supervisor): how it was shed if it was, and a served
// tile's worker queue and compute milliseconds. The slide name travels along for scrubbing only.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { TileRequest } from '../../contract/schemas.js';
import type { ShedOutcome, StageTimes, UsageEntry } from '../../ipc/protocol.js';
import type { ModelBackend } from '../backend.js';
import { onModelRequestDone } from '../route-config.js';

const round = (ms: number) => Math.round(ms * 100) / 100;

/** A v2 request's tiles as its image input's shape (NxHxW, or N PNGs); gRPC's too. */
export function v2Tiles(body: unknown): string {
  const shape = (body as { inputs?: { name?: string; shape?: unknown }[] } | undefined)?.inputs?.find(
    (i) => i.name === 'image',
  )?.shape;
  return Array.isArray(shape) && shape.length ? shape.slice(0, 3).join('x') : 'invalid';
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Writes a gRPC ModelInfer call's line (endpoint "grpc", mode "v2"), for an enabled model. */
    recordGrpcUsage(call: GrpcCall): void;
  }
}

/** A finished ModelInfer call: its model, the status its HTTP twin would have had, how long it
 *  took, how it was shed, and its image input's shape (NxHxW). */
export interface GrpcCall {
  model: string;
  status: number;
  ms: number;
  shed: ShedOutcome | undefined;
  tile: string;
}

/** A usage line as its writers know it: its milliseconds not yet rounded, its worker times whole. */
interface Line {
  model: string;
  endpoint: UsageEntry['endpoint'];
  mode: string;
  status: number;
  ms: number;
  tile: string;
  slide: string | null;
  shed: ShedOutcome | undefined;
  times?: StageTimes;
}

async function usage(app: FastifyInstance, { backend }: { backend: ModelBackend }): Promise<void> {
  /** One line, stamped now; `shed` and the worker times only where there are some. */
  const write = ({ model, endpoint, mode, status, ms, tile, slide, shed, times }: Line) =>
    backend.recordUsage({
      timestamp: new Date().toISOString(),
      model,
      endpoint,
      mode,
      status,
      duration_ms: round(ms),
      tile,
      slide,
      ...(shed && { shed }),
      ...(times && { queue_ms: round(times.queue), compute_ms: round(times.inference) }),
    });
  app.decorate('recordGrpcUsage', ({ model, status, ms, shed, tile }: GrpcCall) => {
    if (app.modelEndpoints.has(model))
      write({ model, endpoint: 'grpc', mode: 'v2', status, ms, tile, slide: null, shed });
  });
  onModelRequestDone(app, (request, reply, route, status, shed) => {
    const body = request.body as Partial<TileRequest> | undefined;
    write({
      model: route.name,
      endpoint: route.endpoint,
      mode:
        route.endpoint === 'v2'
          ? 'v2'
          : ((request.query as { mode?: string }).mode ?? (route.endpoint === 'embed' ? 'embedding' : 'prediction')),
      status,
      ms: reply.elapsedTime,
      tile:
        route.endpoint === 'v2'
          ? v2Tiles(request.body)
          : typeof body?.width === 'number' && typeof body?.height === 'number'
            ? `${body.width}x${body.height}`
            : 'invalid',
      slide: typeof body?.slide_name === 'string' ? body.slide_name : null,
      shed,
      times: request.tile?.times,
    });
  });
}

export default fp(usage, { name: 'usage' });
