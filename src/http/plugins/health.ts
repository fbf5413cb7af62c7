// Liveness (the process answers) and readiness: of the whole service (every enabled model has a
// ready worker) and of one model, which a load balancer checks per model backend. A service that
// is draining (SIGTERM, before it stops accepting) reports every model not ready.
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Supervisor } from '../../../supervisor/supervisor.js';
import { ErrorDetail } from '../schemas/tile.js';

const Live = Type.Object({ status: Type.Literal('ok') });
const Ready = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('not_ready'), Type.Literal('draining')]),
  models: Type.Record(Type.String(), Type.String(), { description: 'State of each enabled model' }),
  not_ready: Type.Array(Type.String()),
});
const ModelReady = Type.Object({
  model: Type.String(),
  status: Type.Union([Type.Literal('ready'), Type.Literal('loading'), Type.Literal('restarting'), Type.Literal('stopped'), Type.Literal('draining')], {
    description: 'ready (200); loading, restarting (a worker failed and waits for its restart), stopped, or draining (the service is stopping) (503)',
  }),
});

/** Readiness says whether the models can serve, not how busy the process is: exempt from the
 *  pressure guard (whose 503 would otherwise take every busy host out of a balancer at once, and
 *  whose body does not fit these responses' schemas). */
const notUnderPressure = { pressureHandler: () => undefined };

export default async function health(fastify: FastifyInstance, { supervisor }: { supervisor: Supervisor }): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['Health'];
  app.get('/health/live', { schema: { tags, response: { 200: Live } } }, async () => ({ status: 'ok' as const }));
  app.get('/health/ready', { config: notUnderPressure, schema: { tags, response: { 200: Ready, 503: Ready } } }, async (_request, reply) => {
    const models = Object.fromEntries([...supervisor.pools.values()].map((p) => [p.name, p.state]));
    const notReady = Object.keys(models).filter((name) => supervisor.draining || models[name] !== 'ready');
    const status = supervisor.draining ? 'draining' : notReady.length ? 'not_ready' : 'ready';
    return reply.code(notReady.length ? 503 : 200).send({ status, models, not_ready: notReady });
  });
  app.get(
    '/health/ready/:model',
    { config: notUnderPressure, schema: { tags, params: Type.Object({ model: Type.String() }), response: { 200: ModelReady, 503: ModelReady, 404: ErrorDetail } } },
    async (request, reply) => {
      const { model } = request.params;
      const pool = supervisor.pools.get(model);
      if (!pool) return reply.code(404).send({ detail: `Model '${model}' is not enabled on this host` });
      const status = supervisor.draining ? 'draining' : pool.state;
      return reply.code(status === 'ready' ? 200 : 503).send({ model, status });
    },
  );
}
