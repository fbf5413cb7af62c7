// The HTTP front: a tree of small plugins over the supervisor. It validates, routes and writes
// responses; it never runs a model.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import underPressure from '@fastify/under-pressure';
import type { Logger } from 'pino';
import type { ServiceConfig } from '../../supervisor/config.js';
import type { Supervisor } from '../../supervisor/supervisor.js';
import errors from './plugins/errors.js';
import nonJsonBody from './plugins/non-json-body.js';
import gracefulClose from './plugins/graceful-close.js';
import openapi from './plugins/openapi.js';
import health from './plugins/health.js';
import modelRoutes from './plugins/model-routes.js';
import usage from './plugins/usage.js';
import metrics from './plugins/metrics.js';
import diagnostics from './plugins/diagnostics.js';
import { UsageLog } from '../usage/usage-log.js';
import { SERVICE_VERSION } from '../version.js';

export interface AppOptions {
  config: ServiceConfig;
  supervisor: Supervisor;
  logger: Logger;
}

export async function buildApp({ config, supervisor, logger }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    // Per-request lines would dominate the log at hundreds of tiles/s; the usage log records requests.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.body_limit_bytes,
    // Every error of a request at once, and no silent coercion ("5" is not an integer).
    ajv: { customOptions: { allErrors: true, coerceTypes: false } },
  });
  await app.register(errors);
  await app.register(nonJsonBody);
  await app.register(gracefulClose);
  await app.register(openapi, { version: SERVICE_VERSION });
  await app.register(underPressure, {
    maxEventLoopDelay: config.pressure.max_event_loop_delay_ms,
    maxHeapUsedBytes: config.pressure.max_heap_used_bytes,
    retryAfter: config.pressure.retry_after_s,
    pressureHandler: (_request, reply, type, value) => {
      reply.code(503).header('retry-after', String(config.pressure.retry_after_s)).send({ detail: `Service under pressure (${type}: ${value}); retry later` });
    },
  });
  await app.register(usage, { log: new UsageLog({ dir: config.data_dir, maxFileBytes: config.usage.max_file_bytes, recentEntries: config.usage.recent_entries, logger }) });
  await app.register(metrics, { supervisor, token: config.admin_token });
  await app.register(health, { supervisor });
  await app.register(diagnostics, { supervisor, config });
  await app.register(modelRoutes, { supervisor, maxTilePixels: config.max_tile_pixels });
  return app;
}
