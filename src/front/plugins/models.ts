// GET /api/models: every enabled model with its state, tasks, tile size and MPP and endpoints, so
// a newcomer (or a client) finds its way without reading the configuration.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Type } from 'typebox';
import type { ModelBackend } from '../backend.js';
import { endpointsOf } from '../route-config.js';
import { TILE_BODY_TYPES } from '../../contract/endpoints.js';

const ModelSummary = Type.Object({
  name: Type.String(),
  state: Type.String({ description: 'ready, loading, failed or stopped' }),
  reason: Type.Union([Type.String(), Type.Null()], { description: 'Why the model failed to load' }),
  instances: Type.Integer(),
  ready_instances: Type.Integer(),
  tasks: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'null until an instance has loaded' }),
  tile: Type.Union([Type.Object({ width: Type.Integer(), height: Type.Integer(), mpp: Type.Number() }), Type.Null()]),
  endpoints: Type.Array(Type.String()),
  content_types: Type.Array(Type.String(), { description: 'The request bodies its POST endpoints take: application/json (the contract), image/png and application/octet-stream (raw RGB), the last two with the fields in the query' }),
  trained: Type.Union([Type.Boolean(), Type.Null()]),
});

async function models(app: FastifyInstance, { backend }: { backend: ModelBackend }): Promise<void> {
  app.get('/api/models', { schema: { tags: ['Models'], summary: 'Enabled models', response: { 200: Type.Object({ models: Type.Array(ModelSummary) }) } } }, async () => ({
    models: backend.models().map((m) => {
      const manifest = m.info?.manifest ?? null;
      return {
        name: m.name,
        state: m.state,
        reason: m.reason,
        instances: m.instances.length,
        ready_instances: m.instances.filter((i) => i.state === 'ready').length,
        tasks: manifest?.tasks ?? null,
        tile: manifest ? { width: manifest.tile.width, height: manifest.tile.height, mpp: manifest.tile.mpp } : null,
        endpoints: endpointsOf(app, m.name),
        content_types: endpointsOf(app, m.name).some((e) => e.startsWith('POST ')) ? [...TILE_BODY_TYPES] : [],
        trained: manifest?.provenance.trained ?? null,
      };
    }),
  }));
}

export default fp(models, { name: 'models', dependencies: ['model-routes'] });
