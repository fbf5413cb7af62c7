// GET /metrics in Prometheus text format (prom-client). Each front counts what it serves in its
// own registry; the supervisor sums every front's with prom-client's AggregatorRegistry (made for
// node:cluster), so any front answers for the whole service. Model and instance states come from
// the supervisor's messages, the same in every front, so those gauges take the first front's value.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ModelBackend } from '../backend.js';
import { onModelRequestDone } from '../route-config.js';
import type { ShedOutcome, StageTimes } from '../../ipc/protocol.js';
import { requireAdminToken } from '../admin-token.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Records one served tile: the batch it ran in, its milliseconds per stage, and its worker
     *  times (queue wait against its batch's run). */
    observeTile(model: string, batchSize: number, stages: Record<string, number>, worker: StageTimes): void;
    /** Counts one request to an enabled model (others are not labels): by endpoint, status and
     *  how it was shed. The HTTP routes' hook and the gRPC service both call it. */
    recordModelRequest: ModelRequestRecorder;
  }
}

export type ModelRequestRecorder = (
  model: string,
  endpoint: string,
  status: number,
  seconds: number,
  shed: ShedOutcome | undefined,
) => void;

async function metrics(
  app: FastifyInstance,
  { backend, token }: { backend: ModelBackend; token: string | null },
): Promise<void> {
  const registry = new Registry();
  // Constructing one installs the responder a cluster worker needs to answer the supervisor's
  // aggregation; the registry it reads is this front's.
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([registry]);
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: 'tile_requests_total',
    help: 'Model requests by model, endpoint and status',
    labelNames: ['model', 'endpoint', 'status'],
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'tile_request_duration_seconds',
    help: 'Model request latency',
    labelNames: ['model', 'endpoint'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const batches = new Histogram({
    name: 'model_batch_size',
    help: 'Size of the batch each tile ran in',
    labelNames: ['model'],
    buckets: [1, 2, 4, 8, 16, 32],
    registers: [registry],
  });
  new Gauge({
    name: 'model_queue_depth',
    help: 'Tiles sent to workers and not yet finished or dropped there (the bounded backlog), summed over fronts',
    labelNames: ['model'],
    registers: [registry],
    collect() {
      for (const m of backend.models()) this.set({ model: m.name }, backend.queued(m.name));
    },
  });
  new Gauge({
    name: 'worker_up',
    help: '1 when the worker instance is ready to serve',
    labelNames: ['model', 'instance'],
    aggregator: 'first',
    registers: [registry],
    collect() {
      this.reset();
      for (const m of backend.models())
        m.instances.forEach((w, i) => this.set({ model: m.name, instance: String(i) }, w.state === 'ready' ? 1 : 0));
    },
  });
  new Gauge({
    name: 'worker_restarts',
    help: 'Times each worker instance exited and was restarted',
    labelNames: ['model', 'instance'],
    aggregator: 'first',
    registers: [registry],
    collect() {
      this.reset();
      for (const m of backend.models())
        m.instances.forEach((w, i) => this.set({ model: m.name, instance: String(i) }, w.restarts));
    },
  });

  const stages = new Histogram({
    name: 'tile_stage_seconds',
    help: 'Per-tile time in each stage: parse (body read, JSON, schema), base64, decode (PNG), preprocess, queue (batch wait), inference (session.run share), ipc (front<->worker), serialize',
    labelNames: ['model', 'stage'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
    registers: [registry],
  });
  // Triton's pair: how long a tile waited in the worker against how long its batch ran.
  const waitBuckets = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
  const queueDuration = new Histogram({
    name: 'tile_queue_duration_seconds',
    help: "A served tile's wait in the worker's queue, from decoded to its batch's start",
    labelNames: ['model'],
    buckets: waitBuckets,
    registers: [registry],
  });
  const computeDuration = new Histogram({
    name: 'tile_compute_duration_seconds',
    help: "The run (session.run) of a served tile's batch",
    labelNames: ['model'],
    buckets: waitBuckets,
    registers: [registry],
  });
  const shed = new Counter({
    name: 'tile_requests_shed_total',
    help: 'Model requests not served: expired (deadline passed, 504), cancelled (client left first), refused (503 at admission: queue full, front busy) or evicted (408: the client fell behind its pace while others needed the budget, its connection reset)',
    labelNames: ['model', 'endpoint', 'outcome'],
    registers: [registry],
  });
  app.decorate('observeTile', (model: string, batchSize: number, times: Record<string, number>, worker: StageTimes) => {
    batches.observe({ model }, batchSize);
    for (const [stage, ms] of Object.entries(times)) stages.observe({ model, stage }, ms / 1000);
    queueDuration.observe({ model }, worker.queue / 1000);
    computeDuration.observe({ model }, worker.inference / 1000);
  });

  const record: ModelRequestRecorder = (model, endpoint, status, seconds, outcome) => {
    if (!app.modelEndpoints.has(model)) return;
    requests.inc({ model, endpoint, status: String(status) });
    latency.observe({ model, endpoint }, seconds);
    if (outcome) shed.inc({ model, endpoint, outcome });
  };
  app.decorate('recordModelRequest', record);
  onModelRequestDone(app, (_request, reply, route, status, outcome) =>
    record(route.name, route.endpoint, status, reply.elapsedTime / 1000, outcome),
  );

  app.get(
    '/metrics',
    { schema: { tags: ['Diagnostics'], summary: 'Prometheus metrics' }, preHandler: requireAdminToken(token) },
    async (_request, reply) => {
      return reply.type(registry.contentType).send(await backend.metrics(registry));
    },
  );
}

export default fp(metrics, { name: 'metrics' });
