// The HTTP app of a front: a tree of small plugins over a ModelBackend. It reads, checks, routes
// and answers requests; it never runs a model.
import { createServer } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { ServiceConfig } from '../config/config.js';
import type { ModelBackend } from './backend.js';
import errors, {
  clientErrorHandler,
  connectRefused,
  expectationFailed,
  frameworkErrorHandler,
} from './plugins/errors.js';
import contentEncoding from './plugins/content-encoding.js';
import queryEncoding from './plugins/query-encoding.js';
import connections, { connectionLimit } from './plugins/connections.js';
import answers from './plugins/answers.js';
import type { ConnectionShare } from './connection-share.js';
import jsonBody from './plugins/json-body.js';
import binaryBody from './plugins/binary-body.js';
import pressure from './plugins/pressure.js';
import nonJsonBody from './plugins/non-json-body.js';
import openapi from './plugins/openapi.js';
import health from './plugins/health.js';
import modelRoutes from './plugins/model-routes.js';
import models from './plugins/models.js';
import usage from './plugins/usage.js';
import metrics from './plugins/metrics.js';
import diagnostics from './plugins/diagnostics.js';
import v2 from './plugins/v2.js';
import { V2Service } from './v2/v2-service.js';
import { SERVICE_VERSION } from '../lib/version.js';
import { tileImageKeyword } from './tile-image.js';
import { modelRoute } from './route-config.js';
import { valueLimit } from './tile-checks.js';

export interface AppOptions {
  config: ServiceConfig;
  backend: ModelBackend;
  logger: Logger;
  /** This front's share of the service's connections, where there are several fronts. */
  connectionShare?: ConnectionShare;
}

export async function buildApp({ config, backend, logger, connectionShare }: AppOptions): Promise<FastifyInstance> {
  const { front } = config;
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    // Per-request lines would dominate the log at hundreds of tiles/s; the usage log records requests.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.body_limit_bytes,
    // Every error of a request at once, and no silent coercion ("5" is not an integer).
    // The tileImage keyword: a parsed body's image_data holds the decoded image (tile-image.ts).
    ajv: { customOptions: { allErrors: true, coerceTypes: false }, plugins: [tileImageKeyword] },
    // Slow clients cannot hold connections open: headers and whole requests have deadlines,
    // checked every second rather than Node's default 30 s.
    serverFactory: (handler) =>
      createServer(
        {
          headersTimeout: front.headers_timeout_ms,
          requestTimeout: front.body_timeout_ms,
          connectionsCheckingInterval: 1000,
          keepAliveTimeout: front.keep_alive_timeout_ms,
        },
        handler,
      )
        .on('checkExpectation', expectationFailed)
        .on('connect', connectRefused),
    // During a stop the service answers 503 in its own shape (plugins/connections.ts).
    return503OnClosing: false,
    // HTTP that Node refuses (headers over the limit, timeouts, malformed) in the same shape.
    clientErrorHandler,
    // A path fastify cannot decode (a bad percent-escape) too.
    frameworkErrors: frameworkErrorHandler,
  });
  await app.register(errors, {
    retryAfterS: config.pressure.retry_after_s,
    models: () => backend.models().map((m) => m.name),
  });
  await app.register(connections, { maxConnections: connectionLimit(config), share: connectionShare });
  await app.register(answers, { backend, sendTimeoutMs: front.body_timeout_ms });
  await app.register(contentEncoding);
  await app.register(queryEncoding);
  const values = (request: FastifyRequest) => {
    const route = modelRoute(request);
    return valueLimit(route && { name: route.name, manifest: backend.model(route.name)?.info?.manifest });
  };
  await app.register(jsonBody, { values });
  await app.register(binaryBody);
  await app.register(nonJsonBody, { values });
  await app.register(pressure, { config: config.pressure });
  await app.register(openapi, { version: SERVICE_VERSION });
  await app.register(usage, { backend });
  await app.register(metrics, { backend, token: config.admin_token });
  await app.register(health, { backend, strict: config.health.strict_readiness });
  await app.register(diagnostics, { backend, token: config.admin_token });
  await app.register(modelRoutes, { backend, config });
  await app.register(models, { backend });
  await app.register(v2, {
    prefix: '/v2',
    service: new V2Service(backend, config),
    retryAfterS: config.pressure.retry_after_s,
    bodyLimit: config.body_limit_bytes,
  });
  return app;
}
