// Every error a request can meet, mapped to the contract: 422 in the HTTPValidationError shape,
// 503 {"status": "loading"} while a model loads, and a plain 500 whose reason stays in the log.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';
import fp from 'fastify-plugin';
import { DeadlineError, ModelLoadingError, QueueFullError, TileInvalidError } from '../../../supervisor/errors.js';
import { bodyNotObject, jsonInvalid, toValidationItems, type ValidationItem } from '../validation-error.js';

export function sendValidationError(reply: FastifyReply, detail: ValidationItem[]): FastifyReply {
  return reply.code(422).send({ detail });
}

export function sendLoading(reply: FastifyReply, retryAfterS: number): FastifyReply {
  return reply.code(503).header('retry-after', String(retryAfterS)).send({ status: 'loading' });
}

const PARTS = [
  ['params', (r: FastifyRequest) => r.params],
  ['querystring', (r: FastifyRequest) => r.query],
  ['body', (r: FastifyRequest) => r.body],
] as const;

/** fastify stops at the first part (params, body, querystring) that fails; a client wants every
 *  error at once, so the parts it did not get to are validated here too. */
function allValidationErrors(request: FastifyRequest, error: FastifyError): ValidationItem[] {
  const failed = error.validationContext ?? 'body';
  return PARTS.flatMap(([part, data]) => {
    if (part === failed) return toValidationItems(error.validation!, part, data(request));
    const validate = request.getValidationFunction(part);
    if (!validate || validate(data(request))) return [];
    return toValidationItems((validate.errors ?? []) as FastifySchemaValidationError[], part, data(request));
  });
}

async function errors(app: FastifyInstance): Promise<void> {
  app.setNotFoundHandler((_request, reply) => reply.code(404).send({ detail: 'Not Found' }));

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error.validation) return sendValidationError(reply, allValidationErrors(request, error));
    if (error instanceof TileInvalidError) return sendValidationError(reply, error.errors);
    if (error instanceof ModelLoadingError) return sendLoading(reply, error.retryAfterS);
    if (error instanceof QueueFullError) return reply.code(503).header('retry-after', String(error.retryAfterS)).send({ detail: error.message });
    if (error instanceof DeadlineError) return reply.code(504).send({ detail: error.message });
    if (error instanceof SyntaxError || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
      return sendValidationError(reply, [jsonInvalid(error.message)]);
    }
    if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return sendValidationError(reply, [bodyNotObject()]);
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) return reply.code(status).send({ detail: error.message });
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ detail: 'Internal server error' });
  });
}

export default fp(errors, { name: 'errors' });
