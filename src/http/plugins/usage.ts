// Records one usage entry per model request, after the response is sent.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { TileRequest } from '../schemas/tile.js';
import type { UsageLog } from '../../usage/usage-log.js';
import { modelRoute } from '../model-route.js';

const RECENT_SLIDES = 1000;

declare module 'fastify' {
  interface FastifyInstance {
    usage: UsageLog;
    /** Slide names of recent requests, memory only, so diagnostics can scrub them from logs. */
    recentSlides: Set<string>;
  }
}

async function usage(app: FastifyInstance, { log }: { log: UsageLog }): Promise<void> {
  app.decorate('usage', log);
  app.decorate('recentSlides', new Set<string>());
  app.addHook('onResponse', async (request, reply) => {
    const route = modelRoute(request);
    if (!route) return;
    const body = request.body as Partial<TileRequest> | undefined;
    if (typeof body?.slide_name === 'string') {
      app.recentSlides.delete(body.slide_name);
      app.recentSlides.add(body.slide_name);
      if (app.recentSlides.size > RECENT_SLIDES) app.recentSlides.delete(app.recentSlides.values().next().value!);
    }
    app.usage.record({
      timestamp: new Date().toISOString(),
      model: route.name,
      endpoint: route.endpoint,
      mode: (request.query as { mode?: string }).mode ?? (route.endpoint === 'embed' ? 'embedding' : 'prediction'),
      status: reply.statusCode,
      duration_ms: Math.round(reply.elapsedTime * 100) / 100,
      tile: typeof body?.width === 'number' && typeof body?.height === 'number' ? `${body.width}x${body.height}` : 'invalid',
    });
  });
  app.addHook('onClose', () => app.usage.close());
}

export default fp(usage, { name: 'usage' });
