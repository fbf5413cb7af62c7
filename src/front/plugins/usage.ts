// Reports one usage entry per model request, after the response is sent, to the service's one
// usage log (kept by the supervisor). The slide name travels along for scrubbing only.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { TileRequest } from '../../contract/schemas.js';
import type { ModelBackend } from '../backend.js';
import { modelRoute } from '../route-config.js';

async function usage(app: FastifyInstance, { backend }: { backend: ModelBackend }): Promise<void> {
  app.addHook('onResponse', async (request, reply) => {
    const route = modelRoute(request);
    if (!route) return;
    const body = request.body as Partial<TileRequest> | undefined;
    backend.recordUsage({
      timestamp: new Date().toISOString(),
      model: route.name,
      endpoint: route.endpoint,
      mode: (request.query as { mode?: string }).mode ?? (route.endpoint === 'embed' ? 'embedding' : 'prediction'),
      status: reply.statusCode,
      duration_ms: Math.round(reply.elapsedTime * 100) / 100,
      tile: typeof body?.width === 'number' && typeof body?.height === 'number' ? `${body.width}x${body.height}` : 'invalid',
      slide: typeof body?.slide_name === 'string' ? body.slide_name : null,
    });
  });
}

export default fp(usage, { name: 'usage' });
