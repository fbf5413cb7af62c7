// The model endpoints: POST /api/predict/<model>, POST /api/embed/<model> and
// GET /api/metadata/<model>, for each enabled model whose package serves that task.
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Supervisor } from '../../../supervisor/supervisor.js';
import type { ModelPool } from '../../../supervisor/model-pool.js';
import { ModelLoadingError } from '../../../supervisor/errors.js';
import type { Manifest, Task } from '../../model-package/manifest.js';
import { readManifest } from '../../model-package/model-package.js';
import type { WorkerInfo } from '../../ipc/protocol.js';
import { ErrorDetail, HTTPValidationError, Loading, ModelMetadata, PredictQuery, TileRequest, TileResponse } from '../schemas/tile.js';
import { checkTile } from '../tile-checks.js';
import { tileResponseJson } from '../response-writer.js';
import { sendValidationError } from './errors.js';
import '../model-route.js';

export interface ModelRoutesOptions {
  supervisor: Supervisor;
  maxTilePixels: number;
}

const Unavailable = { description: 'Model loading ({"status": "loading"}) or queue full ({"detail": ...}); see Retry-After', anyOf: [Loading, ErrorDetail] };
const errorResponses = { 422: HTTPValidationError, 503: Unavailable, 504: ErrorDetail };

/** Tasks a package serves, read from disk at start so routes exist from the first moment. An
 *  unreadable manifest still gets every route: they answer 503 loading while the worker retries,
 *  and /diagnostics shows why it cannot load. */
function plannedTasks(dir: string): Task[] {
  try {
    return readManifest(dir).tasks;
  } catch {
    return ['segmentation', 'prediction', 'embedding'];
  }
}

/** The response is already JSON text (response-writer.ts), so fastify's serializer is bypassed. */
const sendJson = (reply: FastifyReply, body: Buffer) => reply.type('application/json').send(body);

export default async function modelRoutes(fastify: FastifyInstance, { supervisor, maxTilePixels }: ModelRoutesOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  const ready = (pool: ModelPool): WorkerInfo => {
    const info = pool.info;
    if (!info) throw new ModelLoadingError(pool.name, supervisor.config.pressure.retry_after_s);
    return info;
  };

  for (const pool of supervisor.pools.values()) {
    const name = pool.name;
    const tasks = plannedTasks(supervisor.config.models.find((m) => m.name === name)!.path!);
    const tags = ['Models'];

    /** Checks the tile, has a worker run it and writes the response, timing each stage. */
    const run = async (reply: FastifyReply, body: TileRequest, manifest: Manifest, task: Task, withEmbedding = false) => {
      const parse = reply.elapsedTime;
      const checkedAt = performance.now();
      const { errors, png } = checkTile(body, manifest, task === 'prediction', maxTilePixels);
      if (errors.length) return sendValidationError(reply, errors);
      const bulk = task === 'prediction' ? (body.bulk_rna ?? null) : null;
      const sent = performance.now();
      const result = await supervisor.infer(name, { task, withEmbedding, png: png!, width: body.width, height: body.height, bulk });
      const received = performance.now();
      const tissueRatio = body.tissue_ratio ?? result.tissueFraction;
      const json = tileResponseJson(body, { output: result.output, embedding: result.embedding, tissueRatio });
      const t = result.times;
      fastify.observeStages(name, {
        parse,
        base64: sent - checkedAt,
        decode: t.decode,
        preprocess: t.preprocess,
        queue: t.queue,
        inference: t.inference / result.batchSize,
        ipc: received - sent - t.worker,
        serialize: performance.now() - received,
      });
      return sendJson(reply, json);
    };

    if (tasks.includes('prediction') || tasks.includes('segmentation')) {
      app.post(
        `/api/predict/${name}`,
        {
          schema: { summary: `${name} prediction`, tags, body: TileRequest, querystring: PredictQuery, response: { 200: TileResponse, ...errorResponses } },
          config: { model: { name, endpoint: 'predict' } },
        },
        async (request, reply) => {
          const { manifest } = ready(pool);
          const mode = request.query.mode ?? 'prediction';
          const segmentation = manifest.tasks.includes('segmentation');
          if (mode === 'prediction_with_embedding' && (segmentation || !manifest.tasks.includes('embedding'))) {
            return sendValidationError(reply, [{ loc: ['query', 'mode'], msg: "Input should be 'prediction'", type: 'literal_error', ctx: { expected: "'prediction'" }, input: mode }]);
          }
          return run(reply, request.body, manifest, segmentation ? 'segmentation' : 'prediction', mode === 'prediction_with_embedding');
        },
      );
    }

    if (tasks.includes('embedding')) {
      app.post(
        `/api/embed/${name}`,
        { schema: { summary: `${name} embedding`, tags, body: TileRequest, response: { 200: TileResponse, ...errorResponses } }, config: { model: { name, endpoint: 'embed' } } },
        async (request, reply) => run(reply, request.body, ready(pool).manifest, 'embedding'),
      );
    }

    app.get(`/api/metadata/${name}`, { schema: { summary: `${name} metadata`, tags, response: { 200: ModelMetadata, 503: Loading } } }, async () => {
      const { manifest, sha256 } = ready(pool);
      return {
        model: manifest.name,
        version: manifest.version,
        tasks: manifest.tasks,
        tile: manifest.tile,
        ...(manifest.genes && {
          input_genes: manifest.genes.input,
          output_genes: manifest.genes.output,
          gene_panel: manifest.genes.panel,
          bulk_transform: manifest.genes.bulk_transform,
        }),
        ...(manifest.embedding_dim !== undefined && { embedding_dim: manifest.embedding_dim }),
        trained: manifest.provenance.trained,
        provenance: manifest.provenance.method,
        description: manifest.description,
        licence: manifest.license,
        sha256,
      };
    });
  }
}
