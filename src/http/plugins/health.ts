// Liveness (the process answers) and readiness: of the whole service (every enabled model has a
// ready worker) and of one model, which a load balancer checks per model backend.
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Supervisor } from '../../../supervisor/supervisor.js';
import { ErrorDetail } from '../schemas/tile.js';

const Live = Type.Object({ status: Type.Literal('ok') });
const Ready = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('not_ready')]),
  models: Type.Record(Type.String(), Type.String(), { description: 'State of each enabled model' }),
  not_ready: Type.Array(Type.String()),
});
const ModelReady = Type.Object({
  model: Type.String(),
  status: Type.Union([Type.Literal('ready'), Type.Literal('loading'), Type.Literal('restarting'), Type.Literal('stopped')], {
    description: 'ready (200); loading, restarting (a worker failed and waits for its restart) or stopped (503)',
  }),
});

export default async function health(fastify: FastifyInstance, { supervisor }: { supervisor: Supervisor }): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['Health'];
  app.get('/health/live', { schema: { tags, response: { 200: Live } } }, async () => ({ status: 'ok' as const }));
  app.get('/health/ready', { schema: { tags, response: { 200: Ready, 503: Ready } } }, async (_request, reply) => {
    const models = Object.fromEntries([...supervisor.pools.values()].map((p) => [p.name, p.state]));
    const notReady = Object.keys(models).filter((name) => models[name] !== 'ready');
    return reply.code(notReady.length ? 503 : 200).send({ status: notReady.length ? 'not_ready' : 'ready', models, not_ready: notReady });
  });
  app.get(
    '/health/ready/:model',
    { schema: { tags, params: Type.Object({ model: Type.String() }), response: { 200: ModelReady, 503: ModelReady, 404: ErrorDetail } } },
    async (request, reply) => {
      const { model } = request.params;
      const pool = supervisor.pools.get(model);
      if (!pool) return reply.code(404).send({ detail: `Model '${model}' is not enabled on this host` });
      return reply.code(pool.state === 'ready' ? 200 : 503).send({ model, status: pool.state });
    },
  );
}
