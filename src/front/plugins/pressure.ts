// Load shedding with @fastify/under-pressure: past the configured event-loop delay or heap, model
// requests get 503 with Retry-After. Health routes opt out (route config `pressure: false`), so a
// balancer's checks keep an honest answer, and the event loop's delay counts only once the front
// listens: the first samples measure start-up (module loading, route building), not load.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import underPressure from '@fastify/under-pressure';
import type { ServiceConfig } from '../../config/config.js';
import { errors } from '../../lib/errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: the route answers whatever the pressure (health checks). */
    pressure?: boolean;
  }
}

/** under-pressure samples process.memoryUsage(), which reads /proc and throws EMFILE when the
 *  process is out of file descriptors, uncaught inside its timer. Such a sample repeats the last
 *  one instead, and the front counts as under pressure until descriptors are free again. */
function guardMemoryUsage(): () => boolean {
  const sample = process.memoryUsage.bind(process);
  let last = sample();
  let starved = false;
  process.memoryUsage = Object.assign(
    () => {
      try {
        last = sample();
        starved = false;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EMFILE' && (err as NodeJS.ErrnoException).code !== 'ENFILE')
          throw err;
        starved = true;
      }
      return last;
    },
    { rss: () => process.memoryUsage().rss },
  );
  return () => starved;
}

async function pressure(app: FastifyInstance, { config }: { config: ServiceConfig['pressure'] }): Promise<void> {
  const starved = guardMemoryUsage();
  const sampleMs = 1000;
  let countFrom = Infinity;
  app.addHook('onListen', async () => {
    countFrom = Date.now() + 2 * sampleMs;
  });
  await app.register(underPressure, {
    maxEventLoopDelay: config.max_event_loop_delay_ms,
    maxHeapUsedBytes: config.max_heap_used_bytes,
    retryAfter: config.retry_after_s,
    sampleInterval: sampleMs,
    pressureHandler: async (request, _reply, type, value) => {
      if (request.routeOptions.config.pressure === false) return;
      // Before its first sample under-pressure reports an event-loop delay of Infinity.
      if (type === 'eventLoopDelay' && (!Number.isFinite(value) || Date.now() < countFrom)) return;
      throw errors.underPressure(type, value ?? 0);
    },
  });
  app.addHook('onRequest', async (request) => {
    if (starved() && request.routeOptions.config.pressure !== false)
      throw errors.underPressure('open files', app.server.maxConnections);
  });
}

export default fp(pressure, { name: 'pressure', dependencies: ['errors'] });
