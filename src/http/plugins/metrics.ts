// GET /metrics in Prometheus text format (prom-client): requests, latency, queue depth, batch
// sizes, worker restarts and up/down, aggregated across every worker by the supervisor.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Supervisor } from '../../../supervisor/supervisor.js';
import type { WorkerProcess } from '../../../supervisor/worker-process.js';
import { modelRoute } from '../model-route.js';
import { requireAdminToken } from '../admin-token.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Records one tile's milliseconds per stage. */
    observeStages(model: string, times: Record<string, number>): void;
  }
}

async function metrics(app: FastifyInstance, { supervisor, token }: { supervisor: Supervisor; token: string | null }): Promise<void> {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({ name: 'tile_requests_total', help: 'Model requests by model, endpoint and status', labelNames: ['model', 'endpoint', 'status'], registers: [registry] });
  const latency = new Histogram({
    name: 'tile_request_duration_seconds',
    help: 'Model request latency',
    labelNames: ['model', 'endpoint'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const batches = new Histogram({ name: 'model_batch_size', help: 'Tiles per session.run', labelNames: ['model'], buckets: [1, 2, 4, 8, 16, 32], registers: [registry] });
  const restarts = new Counter({ name: 'worker_restarts_total', help: 'Worker processes that exited and were restarted', labelNames: ['model'], registers: [registry] });
  new Gauge({
    name: 'model_queue_depth',
    help: 'Requests accepted and not yet answered',
    labelNames: ['model'],
    registers: [registry],
    collect() {
      for (const pool of supervisor.pools.values()) this.set({ model: pool.name }, pool.outstanding);
    },
  });
  new Gauge({
    name: 'worker_up',
    help: '1 when the worker instance is ready to serve',
    labelNames: ['model', 'instance'],
    registers: [registry],
    collect() {
      this.reset();
      for (const pool of supervisor.pools.values()) pool.workers.forEach((w, i) => this.set({ model: pool.name, instance: String(i) }, w.state === 'ready' ? 1 : 0));
    },
  });

  const stages = new Histogram({
    name: 'tile_stage_seconds',
    help: 'Per-tile time in each stage: parse (body read, JSON, schema), base64, decode (PNG), preprocess, queue (batch wait), inference (session.run share), ipc (supervisor<->worker), serialize',
    labelNames: ['model', 'stage'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
    registers: [registry],
  });
  app.decorate('observeStages', (model: string, times: Record<string, number>) => {
    for (const [stage, ms] of Object.entries(times)) stages.observe({ model, stage }, ms / 1000);
  });

  const observe = (worker: WorkerProcess) => {
    const model = worker.snapshot().model;
    worker.on('batch', (size) => batches.observe({ model }, size));
    worker.on('exit', () => {
      if (worker.autoRestart) restarts.inc({ model });
    });
  };
  supervisor.workers.forEach(observe);
  supervisor.on('worker', observe);

  app.addHook('onResponse', async (request, reply) => {
    const route = modelRoute(request);
    if (!route) return;
    requests.inc({ model: route.name, endpoint: route.endpoint, status: String(reply.statusCode) });
    latency.observe({ model: route.name, endpoint: route.endpoint }, reply.elapsedTime / 1000);
  });

  app.get('/metrics', { schema: { tags: ['Diagnostics'], summary: 'Prometheus metrics' }, preHandler: requireAdminToken(token) }, async (_request, reply) => {
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}

export default fp(metrics, { name: 'metrics' });
