// Every error a request can meet, mapped to the contract: 422 in the HTTPValidationError shape,
// 503 {"status": "loading"} while a model loads, and a plain 500 whose reason stays in the log.
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import fp from 'fastify-plugin';
import { DeadlineError, ModelLoadingError, QueueFullError, TileInvalidError } from '../../../supervisor/errors.js';
import { jsonInvalid, toValidationItems, type ValidationItem } from '../validation-error.js';

export function sendValidationError(reply: FastifyReply, detail: ValidationItem[]): FastifyReply {
  return reply.code(422).send({ detail });
}

export function sendLoading(reply: FastifyReply, retryAfterS: number): FastifyReply {
  return reply.code(503).header('retry-after', String(retryAfterS)).send({ status: 'loading' });
}

async function errors(app: FastifyInstance): Promise<void> {
  app.setNotFoundHandler((_request, reply) => reply.code(404).send({ detail: 'Not Found' }));

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error.validation) {
      const context = error.validationContext ?? 'body';
      const data = context === 'querystring' ? request.query : context === 'params' ? request.params : request.body;
      return sendValidationError(reply, toValidationItems(error.validation, context, data));
    }
    if (error instanceof TileInvalidError) return sendValidationError(reply, error.errors);
    if (error instanceof ModelLoadingError) return sendLoading(reply, error.retryAfterS);
    if (error instanceof QueueFullError) return reply.code(503).header('retry-after', String(error.retryAfterS)).send({ detail: error.message });
    if (error instanceof DeadlineError) return reply.code(504).send({ detail: error.message });
    if (error instanceof SyntaxError || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
      return sendValidationError(reply, [jsonInvalid(error.message)]);
    }
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) return reply.code(status).send({ detail: error.message });
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ detail: 'Internal server error' });
  });
}

export default fp(errors, { name: 'errors' });
