// A model request's tile, run: checked against the loaded package, answered by a worker (with
// the request's place in the queue and its client's signal: request.tile, request-ticket.ts), and
// written as the response: the contract's JSON, or the output tensor to a client that asks for
// it, each stage timed for the metrics. The routes that call it: plugins/model-routes.ts.
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ServiceConfig } from '../config/config.js';
import type { Manifest, Task } from '../model-package/manifest.js';
import { errors } from '../lib/errors.js';
import type { ModelBackend } from './backend.js';
import type { TileBody } from './tile-image.js';
import { checkTile } from './tile-checks.js';
import { negotiate, outputTensor, tileResponseJson } from './response-writer.js';

/** Runs a tile of model `name` and writes the response; `fastify` observes each tile's stages
 *  (plugins/metrics.ts). */
export function tileHandler(fastify: FastifyInstance, backend: ModelBackend, config: ServiceConfig, name: string) {
  /** Checks the tile, has a worker run it and writes the response (JSON, or the output tensor
   *  to a client that asks for it), timing each stage. */
  return async (reply: FastifyReply, body: TileBody, manifest: Manifest, task: Task, withEmbedding = false) => {
    const { ticket, signal } = reply.request.tile!;
    const parse = reply.elapsedTime;
    const answerAs = negotiate(reply.request.headers.accept, !withEmbedding);
    if (!answerAs)
      throw errors.notAcceptable(
        'prediction_with_embedding answers two tensors (output and embedding): Accept application/json, or ask for each',
      );
    const tensor = answerAs === 'tensor';
    const checkedAt = performance.now();
    const { errors: invalid, image } = checkTile(body, manifest, task === 'prediction', config.max_tile_pixels);
    if (invalid.length || !image) throw errors.tileInvalid(invalid);
    const bulk = task === 'prediction' ? (body.bulk_rna ?? null) : null;
    const sent = performance.now();
    const result = await backend.infer(
      name,
      { task, withEmbedding, image, width: body.width, height: body.height, bulk },
      // The image's bytes are the body's, or decoded from its image_data: read no more here.
      { ticket, signal, spent: image.bytes },
    );
    const received = performance.now();
    reply.request.tile!.times = result.times;
    const tissueRatio = body.tissue_ratio ?? result.tissueFraction;
    const answer = tensor
      ? outputTensor(result.output, body.height, body.width)
      : tileResponseJson(body, { output: result.output, embedding: result.embedding, tissueRatio });
    const t = result.times;
    fastify.observeTile(
      name,
      result.batchSize,
      {
        parse,
        base64: sent - checkedAt,
        decode: t.decode,
        preprocess: t.preprocess,
        queue: t.queue,
        inference: t.inference / result.batchSize,
        ipc: received - sent - t.worker,
        serialize: performance.now() - received,
      },
      t,
    );
    reply.header('vary', 'accept');
    // Which model answered: a client whose run spans servers, or a reload, can tell versions apart.
    reply.header('x-model-sha256', result.sha256);
    // Bytes already (response-writer.ts): fastify's serializer is bypassed.
    if (Buffer.isBuffer(answer)) return reply.type('application/json').send(answer);
    if (tissueRatio !== null) reply.header('x-tissue-ratio', String(tissueRatio));
    return reply
      .header('x-tensor-dtype', answer.dtype)
      .header('x-tensor-shape', answer.shape.join(','))
      .type('application/octet-stream')
      .send(answer.bytes);
  };
}
