// Liveness (the process answers) and readiness: of the whole service (every enabled model has a
// ready instance; failed models listed apart, and blocking only under strict readiness) and of one
// model (what a balancer's per-model backend checks). A draining service is not ready.
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { ModelBackend } from '../backend.js';
import { errors } from '../../lib/errors.js';
import { ErrorDetail } from '../../contract/schemas.js';

const Live = Type.Object({ status: Type.Literal('ok') });
const Ready = Type.Object({
  status: Type.Union([Type.Literal('ready'), Type.Literal('not_ready'), Type.Literal('draining')]),
  models: Type.Record(Type.String(), Type.String(), {
    description: 'State of each enabled model: ready, loading, failed or stopped',
  }),
  not_ready: Type.Array(Type.String(), { description: 'Models without a ready instance (loading or failed)' }),
  failed: Type.Array(Type.String(), {
    description: 'Models whose package cannot load (see /api/models for the reason)',
  }),
});
const ModelReady = Type.Object({
  model: Type.String(),
  status: Type.Union([
    Type.Literal('ready'),
    Type.Literal('loading'),
    Type.Literal('failed'),
    Type.Literal('stopped'),
    Type.Literal('draining'),
  ]),
  reason: Type.Union([Type.String(), Type.Null()]),
});

export default async function health(
  fastify: FastifyInstance,
  { backend, strict }: { backend: ModelBackend; strict: boolean },
): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['Health'];
  // Health checks answer whatever the load: a balancer must see the truth.
  const config = { pressure: false };

  app.get('/health/live', { schema: { tags, response: { 200: Live } }, config }, async () => ({
    status: 'ok' as const,
  }));

  app.get(
    '/health/ready',
    { schema: { tags, response: { 200: Ready, 503: Ready } }, config },
    async (_request, reply) => {
      const states = Object.fromEntries(backend.models().map((m) => [m.name, m.state]));
      const names = Object.keys(states);
      const failed = names.filter((n) => states[n] === 'failed');
      const notReady = names.filter((n) => states[n] !== 'ready');
      const blocking = strict ? notReady : notReady.filter((n) => states[n] !== 'failed');
      const status = backend.draining ? 'draining' : blocking.length ? 'not_ready' : 'ready';
      return reply.code(status === 'ready' ? 200 : 503).send({ status, models: states, not_ready: notReady, failed });
    },
  );

  app.get(
    '/health/ready/:model',
    {
      schema: {
        tags,
        params: Type.Object({ model: Type.String() }),
        response: { 200: ModelReady, 503: ModelReady, 404: ErrorDetail },
      },
      config,
    },
    async (request, reply) => {
      const view = backend.model(request.params.model);
      if (!view)
        throw errors.notFound(
          request.url,
          backend.models().map((m) => m.name),
        );
      const status = backend.draining ? 'draining' : view.state;
      return reply.code(status === 'ready' ? 200 : 503).send({ model: view.name, status, reason: view.reason });
    },
  );
}
