// The Open Inference Protocol (KServe v2) over REST, under /v2: server and model health and
// metadata, and inference with JSON or binary tensor data (v2/rest-body.ts), answered by
// v2/v2-service.ts. An encapsulated plugin: its own body parser (one for every content type: the
// binary extension is framed by a header, not by Content-Type) and its own error shape
// {"error": "..."}: a bad request is 400, a model not enabled 404, loading or busy 503.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { Ajv } from 'ajv';
import { ServiceError } from '../../lib/errors.js';
import type { V2Service } from '../v2/v2-service.js';
import { countBytes, holdTicket, uploadOf } from '../request-ticket.js';
import {
  binaryBody,
  binaryOutputs,
  HEADER_LENGTH,
  InferRequestBody,
  parseBody,
  toInferRequest,
  writeResponse,
} from '../v2/rest-body.js';

export interface V2Options {
  service: V2Service;
  retryAfterS: number;
  bodyLimit: number;
}

const Model = Type.Object({ model: Type.String(), version: Type.Optional(Type.String()) });
type ModelParams = { model: string; version?: string };

/** Any error as the protocol's: status and {"error": message}. */
export function protocolError(error: FastifyError, bodyLimit: number): { status: number; error: ServiceError } {
  if (error instanceof ServiceError)
    return { status: error.code === 'TILE_ERR_VALIDATION' ? 400 : error.statusCode, error };
  if (error.validation) {
    const what = error.validation.map((e) => `${e.instancePath || '(the body)'} ${e.message}`).join('; ');
    return {
      status: 400,
      error: new ServiceError('TILE_ERR_V2_INVALID', `the request's JSON does not fit the protocol: ${what}`),
    };
  }
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return {
      status: 400,
      error: new ServiceError(
        'TILE_ERR_V2_INVALID',
        `the body is over the limit of ${bodyLimit} bytes (body_limit_bytes): send fewer tiles per request`,
      ),
    };
  const status = error.statusCode ?? 500;
  return status >= 400 && status < 500
    ? { status, error: new ServiceError('TILE_ERR_V2_INVALID', error.message) }
    : { status: 500, error: ServiceError.from(error) };
}

export default async function v2(
  fastify: FastifyInstance,
  { service, retryAfterS, bodyLimit }: V2Options,
): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const health = { pressure: false };

  // The protocol's error is one message: its schemas stop at a body's first error. The app's ajv
  // lists every error (the contract's 422 names each field), and a body of 3.6 million `{}` inputs
  // took 44 s and 4 GB to list before it failed with a 500 (its message past a string's length).
  const ajv = new Ajv({ allErrors: false, coerceTypes: false, addUsedSchema: false, strict: false });
  app.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      done(null, parseBody(body as Buffer, request.headers[HEADER_LENGTH] as string | undefined));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  app.setErrorHandler((err: FastifyError, request, reply) => {
    const { status, error } = protocolError(err, bodyLimit);
    if (status === 503) reply.header('retry-after', String(error.retryAfterS ?? retryAfterS));
    if (status >= 500 && error.code === 'TILE_ERR_INTERNAL')
      request.log.error({ err, errorCode: error.code }, 'request failed');
    const message = error.code === 'TILE_ERR_INTERNAL' ? 'Internal server error' : error.message;
    return reply.code(status).header('x-error-code', error.code).send({ error: message });
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .header('x-error-code', 'TILE_ERR_NOT_FOUND')
      .send({
        error: `${request.method} ${request.url.split('?')[0]} is not a path of the Open Inference Protocol this service serves`,
      }),
  );

  // The contract's /openapi.json documents the contract; this protocol has its own specification.
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
  });

  const answer = (reply: FastifyReply, ok: boolean, body: object) => reply.code(ok ? 200 : 503).send(body);

  app.get('/', async () => service.serverMetadata());
  app.get('/health/live', { config: health }, async () => ({ live: true }));
  app.get('/health/ready', { config: health }, async (_request, reply) => {
    const ready = service.ready();
    return answer(reply, ready, { ready });
  });

  for (const prefix of ['/models/:model', '/models/:model/versions/:version']) {
    app.get(prefix, { schema: { params: Model } }, async (request) =>
      service.modelMetadata(request.params.model, request.params.version),
    );
    app.get(`${prefix}/ready`, { schema: { params: Model }, config: health }, async (request, reply) => {
      const ready = service.modelReady(request.params.model, request.params.version);
      return answer(reply, ready, { name: request.params.model, ready });
    });
    app.post(
      `${prefix}/infer`,
      {
        schema: { params: Model, body: InferRequestBody },
        // Counted in the usage log and the metrics as the contract's requests.
        config: { model: { endpoint: 'v2' } },
        // Admitted before the body is read, its bytes counted as they arrive, its tiles cancelled
        // when the client leaves, as the contract's routes (model-routes.ts).
        onRequest: async (request: FastifyRequest, reply: FastifyReply) => {
          const { model, version } = request.params as ModelParams;
          holdTicket(request, reply, service.admit(model, version, uploadOf(request)));
        },
        preParsing: countBytes,
      },
      async (request, reply) => {
        const { ticket, signal } = request.tile!;
        // The tiles' bytes are the body's, read no more here once they are answered.
        const response = await service.infer(
          request.params.model,
          request.params.version,
          toInferRequest(request.body),
          { ticket, signal, spent: binaryBody(request.body) },
        );
        const { body, headerLength } = writeResponse(response, binaryOutputs(request.body));
        // Which model answered, as the contract's routes say it (tile-handler.ts).
        reply.header('x-model-sha256', response.sha256);
        if (headerLength === null) return reply.type('application/json').send(body);
        return reply.header(HEADER_LENGTH, String(headerLength)).type('application/octet-stream').send(body);
      },
    );
  }
}
