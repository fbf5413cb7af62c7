// The model endpoints: POST /api/predict/<model>, POST /api/embed/<model> and
// GET /api/metadata/<model>, for each enabled model whose package serves that task. A request is
// admitted (model state, this front's queue share, bytes held) before its body is read.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ServiceConfig } from '../../config/config.js';
import type { Manifest, Task } from '../../model-package/manifest.js';
import { readManifest } from '../../model-package/model-package.js';
import type { WorkerInfo } from '../../ipc/protocol.js';
import { errors } from '../../lib/errors.js';
import { literalItem } from '../validation-error.js';
import { unavailable, type ModelBackend } from '../backend.js';
import {
  ErrorDetail,
  HTTPValidationError,
  Loading,
  ModelMetadata,
  predictQuery,
  TileResponse,
} from '../../contract/schemas.js';
import { TileBody } from '../tile-image.js';
import { tileHandler } from '../tile-handler.js';
import { countBytes, holdTicket, uploadOf } from '../request-ticket.js';
import { describeBodies, describeRoute, requestDocs } from '../route-docs.js';
import { endpointsFor, predictModes } from '../../contract/endpoints.js';

export interface ModelRoutesOptions {
  backend: ModelBackend;
  config: ServiceConfig;
}

const Unavailable = {
  description:
    'Model loading ({"status": "loading"}), failed to load, queue full or service busy ({"detail": ...}); see Retry-After',
  anyOf: [Loading, ErrorDetail],
};
const errorResponses = {
  404: ErrorDetail,
  406: ErrorDetail,
  413: ErrorDetail,
  415: ErrorDetail,
  422: HTTPValidationError,
  500: ErrorDetail,
  503: Unavailable,
  504: ErrorDetail,
};
/** The answer as JSON (the contract's ModelResponse, written as bytes: response-writer.ts), or
 *  the output tensor's bytes for a client that asks for them. */
const answers = {
  200: {
    description:
      'The ModelResponse; with Accept: application/octet-stream, the output tensor (a mask uint8 [height, width], else float32 [n], little-endian), its dtype in X-Tensor-Dtype, its shape in X-Tensor-Shape, tissue_ratio in X-Tissue-Ratio',
    content: {
      'application/json': { schema: TileResponse },
      'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
    },
  },
  ...errorResponses,
};

/** The package's manifest as read from disk at start, so routes (and their docs) exist from the
 *  first moment; null when unreadable: every route then exists and answers 503 while the model
 *  is failed or loading, and /api/models says why. */
function plannedManifest(dir: string): Manifest | null {
  try {
    return readManifest(dir);
  } catch {
    return null;
  }
}

async function modelRoutes(fastify: FastifyInstance, { backend, config }: ModelRoutesOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  fastify.decorateRequest('tile', null);
  fastify.decorate('modelEndpoints', new Map<string, string[]>());

  /** The loaded package of a ready model; otherwise throws why it is not (failed, loading). */
  const ready = (name: string): WorkerInfo => {
    const view = backend.model(name);
    const error = unavailable(name, view);
    if (error) throw error;
    if (!view?.info) throw errors.modelLoading(name);
    return view.info;
  };

  for (const entry of config.models) {
    const { name } = entry;
    const planned = plannedManifest(entry.path!);
    const tasks: Task[] = planned?.tasks ?? ['segmentation', 'prediction', 'embedding'];
    // An unreadable package offers every mode: the loaded manifest decides (below).
    const modes = planned ? predictModes(tasks) : predictModes(['prediction', 'embedding']);
    const querystring = predictQuery(modes);
    const tags = ['Models'];
    const endpoints = endpointsFor(name, tasks);
    fastify.modelEndpoints.set(name, endpoints);

    /** Decided before the body is read: a request that cannot be served costs no memory. Its
     *  place is held until the response is done and the worker has finished or dropped its tile;
     *  a client that leaves first cancels the tile. */
    const admit = async (request: FastifyRequest, reply: FastifyReply) => {
      holdTicket(request, reply, backend.admit(name, 1, uploadOf(request)));
    };

    const run = tileHandler(fastify, backend, config, name);

    if (endpoints.includes(`POST /api/predict/${name}`)) {
      app.post(
        `/api/predict/${name}`,
        {
          schema: {
            summary: `${name} prediction`,
            description: `${describeRoute(name, planned, tasks.includes('segmentation') ? 'segmentation' : 'prediction')}\n\n${describeBodies(`/api/predict/${name}`, planned)}`,
            tags,
            body: TileBody,
            querystring,
            response: answers,
          },
          config: { model: { name, endpoint: 'predict' }, swaggerTransform: requestDocs(planned, querystring) },
          onRequest: admit,
          preParsing: countBytes,
        },
        async (request, reply) => {
          const { manifest } = ready(name);
          const mode = request.query.mode ?? 'prediction';
          const segmentation = manifest.tasks.includes('segmentation');
          // The package may have changed since the routes were made: its own modes decide.
          if (!predictModes(manifest.tasks).includes(mode)) {
            throw errors.tileInvalid([literalItem(['query', 'mode'], ['prediction'], mode)]);
          }
          return run(
            reply,
            request.body,
            manifest,
            segmentation ? 'segmentation' : 'prediction',
            mode === 'prediction_with_embedding',
          );
        },
      );
    }

    if (endpoints.includes(`POST /api/embed/${name}`)) {
      app.post(
        `/api/embed/${name}`,
        {
          schema: {
            summary: `${name} embedding`,
            description: `${describeRoute(name, planned, 'embedding')}\n\n${describeBodies(`/api/embed/${name}`, planned)}`,
            tags,
            body: TileBody,
            response: answers,
          },
          config: { model: { name, endpoint: 'embed' }, swaggerTransform: requestDocs(planned, null) },
          onRequest: admit,
          preParsing: countBytes,
        },
        async (request, reply) => run(reply, request.body, ready(name).manifest, 'embedding'),
      );
    }

    app.get(
      `/api/metadata/${name}`,
      { schema: { summary: `${name} metadata`, tags, response: { 200: ModelMetadata, 503: Unavailable } } },
      async () => {
        const { manifest, sha256 } = ready(name);
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
      },
    );
  }
}

export default fp(modelRoutes, {
  name: 'model-routes',
  dependencies: ['errors', 'metrics'],
  decorators: { fastify: ['observeTile'] },
});
