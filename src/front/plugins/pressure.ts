// Load shedding with @fastify/under-pressure: past the configured event-loop delay or heap, model
// requests get 503 with Retry-After. Health routes opt out (route config `pressure: false`), so a
// balancer's checks keep an honest answer, and the event loop's delay counts only once the front
// listens: the first samples measure start-up (module loading, route building), not load.
import { getHeapStatistics } from 'node:v8';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import underPressure from '@fastify/under-pressure';
import type { Logger } from 'pino';
import { settingSource, type ServiceConfig } from '../../config/config.js';
import { errors, type ErrorCode } from '../../lib/errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: the route answers whatever the pressure (health checks). */
    pressure?: boolean;
  }
}

/** Warns when pressure.max_heap_used_bytes is above this front's V8 heap limit (heap_size_limit:
 *  the fronts' flags, supervisor/v8-flags.ts, and NODE_OPTIONS set it, not the supervisor's):
 *  the heap never gets there, so the setting never sheds load. A tuning mistake, not a broken
 *  configuration: the service starts. */
export function warnUnreachableHeap(
  config: ServiceConfig['pressure'],
  logger: Logger,
  limit = getHeapStatistics().heap_size_limit,
): void {
  const value = config.max_heap_used_bytes;
  if (value <= limit) return;
  const mib = (bytes: number) => `${Math.round(bytes / 1024 ** 2)} MiB`;
  logger.warn(
    {
      errorCode: 'TILE_ERR_CONFIG_HEAP_LIMIT' satisfies ErrorCode,
      setting: 'pressure.max_heap_used_bytes',
      value,
      heapSizeLimit: limit,
    },
    `${settingSource('pressure.max_heap_used_bytes')} is ${value} (${mib(value)}), above a front's V8 heap limit of ${limit} (${mib(limit)}): its heap never gets there, so it never sheds load; lower it, or raise the limit with NODE_OPTIONS=--max-old-space-size=<MiB>`,
  );
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
