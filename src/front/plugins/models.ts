// GET /api/models: every enabled model with its state, tasks, tile size and MPP and endpoints, so
// a newcomer (or a client) finds its way without reading the configuration.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Type, type TSchema } from 'typebox';
import type { ModelBackend } from '../backend.js';
import { endpointsOf } from '../route-config.js';
import { TILE_BODY_TYPES } from '../../contract/endpoints.js';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/** One instance: where it runs, on which execution provider and why not on those before it, how
 *  long it took to load and to run each batch shape at warm-up. */
const WorkerSummary = Type.Object({
  id: Type.String(),
  state: Type.String(),
  gpu: Nullable(Type.String()),
  provider: Nullable(Type.String({ description: 'cuda, webgpu or cpu; null before the first load' })),
  provider_skipped: Type.Array(Type.Object({ provider: Type.String(), reason: Type.String() }), {
    description: 'Providers tried first, and why each was passed over',
  }),
  adapter: Nullable(
    Type.Object(
      {
        name: Type.String(),
        type: Type.String(),
        driver: Type.String(),
        pci: Nullable(Type.String()),
        software: Type.Boolean(),
      },
      { description: 'The Vulkan device webgpu runs on' },
    ),
  ),
  load_ms: Nullable(Type.Integer()),
  warmup: Nullable(
    Type.Object({
      batch_shapes: Type.Array(Type.Integer(), {
        description: 'Batch sizes run; a batch is padded up to the next one',
      }),
      batch_independent: Type.Boolean({ description: "A tile's outputs do not depend on what else is in its batch" }),
      note: Nullable(Type.String()),
      shapes: Type.Array(
        Type.Object({
          batch: Type.Integer(),
          ms: Type.Integer(),
          identical: Type.Boolean(),
          difference: Type.Optional(Type.String()),
        }),
      ),
    }),
  ),
  restarts: Type.Integer(),
  last_error: Nullable(Type.String()),
});

const ModelSummary = Type.Object({
  name: Type.String(),
  state: Type.String({ description: 'ready, loading, failed or stopped' }),
  reason: Type.Union([Type.String(), Type.Null()], { description: 'Why the model failed to load' }),
  instances: Type.Integer(),
  ready_instances: Type.Integer(),
  tasks: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'null until an instance has loaded' }),
  tile: Type.Union([Type.Object({ width: Type.Integer(), height: Type.Integer(), mpp: Type.Number() }), Type.Null()]),
  endpoints: Type.Array(Type.String()),
  content_types: Type.Array(Type.String(), {
    description:
      'The request bodies its POST endpoints take: application/json (the contract), image/png and application/octet-stream (raw RGB), the last two with the fields in the query',
  }),
  trained: Type.Union([Type.Boolean(), Type.Null()]),
  workers: Type.Array(WorkerSummary),
});

async function models(app: FastifyInstance, { backend }: { backend: ModelBackend }): Promise<void> {
  app.get(
    '/api/models',
    {
      schema: {
        tags: ['Models'],
        summary: 'Enabled models',
        response: { 200: Type.Object({ models: Type.Array(ModelSummary) }) },
      },
    },
    async () => ({
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
          workers: m.instances.map((i) => ({
            id: i.id,
            state: i.state,
            gpu: i.gpu,
            provider: i.provider,
            provider_skipped: i.providerSkipped,
            adapter: i.adapter && {
              name: i.adapter.name,
              type: i.adapter.type,
              driver: i.adapter.driver,
              pci: i.adapter.pci,
              software: i.adapter.software,
            },
            load_ms: i.loadMs,
            warmup: i.warmup && {
              batch_shapes: i.warmup.shapes,
              batch_independent: i.warmup.batchIndependent,
              note: i.warmup.note,
              shapes: i.warmup.checks,
            },
            restarts: i.restarts,
            last_error: i.lastError,
          })),
        };
      }),
    }),
  );
}

export default fp(models, { name: 'models', dependencies: ['model-routes'] });
