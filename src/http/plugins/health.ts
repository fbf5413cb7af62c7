// Liveness (the process answers) and readiness (every enabled model has a ready worker).
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { Supervisor } from '../../../supervisor/supervisor.js';

const Live = Type.Object({ status: Type.Literal('ok') });
const Ready = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('not_ready')]),
  models: Type.Record(Type.String(), Type.String(), { description: 'State of each enabled model' }),
  not_ready: Type.Array(Type.String()),
});

export default async function health(app: FastifyInstance, { supervisor }: { supervisor: Supervisor }): Promise<void> {
  const tags = ['Health'];
  app.get('/health/live', { schema: { tags, response: { 200: Live } } }, async () => ({ status: 'ok' as const }));
  app.get('/health/ready', { schema: { tags, response: { 200: Ready, 503: Ready } } }, async (_request, reply) => {
    const models = Object.fromEntries([...supervisor.pools.values()].map((p) => [p.name, p.state]));
    const notReady = Object.keys(models).filter((name) => models[name] !== 'ready');
    return reply.code(notReady.length ? 503 : 200).send({ status: notReady.length ? 'not_ready' : 'ready', models, not_ready: notReady });
  });
}
