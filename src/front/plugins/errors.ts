// Where every error becomes a response: ServiceErrors (src/lib/errors.ts) with their own status and
// body, schema failures as the contract's 422, a Retry-After on every 503, a 405 with Allow for a
// path's other methods, HTTP Node refuses (431, 408, 400) in the same shape, and a plain 500
// whose reason stays in the log. The x-error-code header names the error's code; bodies stay as
// the contract writes them.
import { type IncomingMessage, maxHeaderSize, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';
import fp from 'fastify-plugin';
import { errors as make, ServiceError } from '../../lib/errors.js';
import { bodyNotObject, jsonInvalid, toValidationItems, type ValidationItem } from '../validation-error.js';
import { fieldsLocation } from '../tile-image.js';

export interface ErrorsOptions {
  retryAfterS: number;
  /** The enabled models, named by a 404 under /api. */
  models: () => string[];
}

const PARTS = [
  ['params', (r: FastifyRequest) => r.params],
  ['querystring', (r: FastifyRequest) => r.query],
  ['body', (r: FastifyRequest) => r.body],
] as const;

/** fastify stops at the first part (params, body, querystring) that fails; a client wants every
 *  error at once, so the parts it did not get to are validated here too. A binary tile's fields
 *  are validated as its body and reported where they were sent, in the query. */
function allValidationErrors(request: FastifyRequest, error: FastifyError): ValidationItem[] {
  const failed = error.validationContext ?? 'body';
  return PARTS.flatMap(([part, data]) => {
    const root = part === 'body' ? fieldsLocation(request.body) : undefined;
    if (part === failed) return toValidationItems(error.validation!, part, data(request), root);
    const validate = request.getValidationFunction(part);
    if (!validate || validate(data(request))) return [];
    return toValidationItems((validate.errors ?? []) as FastifySchemaValidationError[], part, data(request), root);
  });
}

/** fastify's own errors, as the service's. */
function toServiceError(request: FastifyRequest, error: FastifyError): ServiceError | null {
  if (error instanceof ServiceError) return error;
  if (error.validation) return make.tileInvalid(allValidationErrors(request, error));
  if (
    error instanceof SyntaxError ||
    error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ||
    error.code === 'FST_ERR_CTP_INVALID_JSON_BODY'
  )
    return make.tileInvalid([jsonInvalid(error.message)]);
  // A Content-Type fastify cannot even read is, to FastAPI, a body that is not an object.
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return make.tileInvalid([bodyNotObject()]);
  return null;
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];
/** How long a socket whose request Node's parser refused is drained before it is closed. */
const LINGER_MS = 1000;

/** What Node's HTTP parser refuses before fastify sees a request (fastify's clientErrorHandler,
 *  app.ts), in the service's shape, on the socket, which then closes. */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const error =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? make.headersTooLarge(maxHeaderSize)
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? make.requestTimeout()
        : make.badRequest(err.message);
  if (!socket.writable) return void socket.destroy(err);
  answerAndClose(socket, error);
}

/** What Node's HTTP server answers itself before fastify sees a request, in the service's shape:
 *  an Expect header it cannot meet (Node: a bare 417; the body, if sent all the same, is read and
 *  dropped, and the connection kept, as Node does) and CONNECT (Node: the socket closed without
 *  an answer; here closed after it). Listeners of the server's events (app.ts). */
export function expectationFailed(request: IncomingMessage, response: ServerResponse): void {
  const error = make.expectationFailed(String(request.headers.expect));
  const body = JSON.stringify(error.body());
  response.writeHead(error.statusCode, {
    'content-length': Buffer.byteLength(body),
    'content-type': 'application/json',
    'x-error-code': error.code,
  });
  response.end(body);
}
export const connectRefused = (request: IncomingMessage, socket: Duplex) =>
  answerAndClose(socket, make.noTunnel(request.url ?? ''));

/** The error on the socket, which then closes. */
function answerAndClose(socket: Duplex, error: ServiceError): void {
  const body = JSON.stringify(error.body());
  // The answer, then a FIN; what the client is still sending (the rest of a 70 kB URL) is read and
  // dropped until it closes, or for a second: closing with it unread makes the kernel send a
  // reset, which can reach the client before it has read the answer (seen on Node 24).
  socket.end(
    `HTTP/1.1 ${error.statusCode} ${STATUS_CODES[error.statusCode]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nX-Error-Code: ${error.code}\r\nConnection: close\r\n\r\n${body}`,
  );
  socket.resume();
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

/** What fastify refuses before routing (FST_ERR_BAD_URL: a path with a bad percent-escape) as a
 *  400 in the service's shape, under /v2 in the protocol's. */
export function frameworkErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const bad = make.badRequest(error.message);
  void reply
    .code(bad.statusCode)
    .header('x-error-code', bad.code)
    .send(/^\/v2(\/|\?|$)/.test(request.url) ? { error: bad.message } : bad.body());
}

async function errors(app: FastifyInstance, { retryAfterS, models }: ErrorsOptions): Promise<void> {
  // A path that exists for other methods is a 405 naming them (Allow), not a 404.
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const allowed = METHODS.filter((method) => app.findRoute({ method, url: path }));
    // Unless a route takes the request's own method: @fastify/static answers a file it lacks under
    // /docs/static/ through here (it was a 405 "takes GET, HEAD, not GET").
    if (allowed.length && !allowed.includes(request.method)) {
      reply.header('allow', allowed.join(', '));
      throw make.methodNotAllowed(request.method, path, allowed);
    }
    throw make.notFound(request.url, models());
  });
  // Said before a body is read: fastify reads and parses one for a path it does not serve as for
  // any route, and a malformed body there was a 422, not the 404 or 405 (OPTIONS with a
  // Content-Type and no body; an attack session). The prefix's own handler answers (under /v2,
  // the protocol's).
  app.addHook('onRequest', async (request, reply) => {
    if (request.is404) return request.routeOptions.handler.call(app, request, reply);
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const known = toServiceError(request, error);
    if (known && known.code !== 'TILE_ERR_INTERNAL') {
      if (known.statusCode === 503) reply.header('retry-after', String(known.retryAfterS ?? retryAfterS));
      if (known.statusCode === 401) reply.header('www-authenticate', 'Bearer');
      return reply.code(known.statusCode).header('x-error-code', known.code).send(known.body());
    }
    // Other client errors of fastify's (413 body too large, 415 media type, ...) keep their status
    // and their own FST_ERR_* code.
    const status = error.statusCode ?? 500;
    if (!known && status >= 400 && status < 500) {
      if (error.code) reply.header('x-error-code', error.code);
      return reply.code(status).send({ detail: error.message });
    }
    const internal = ServiceError.from(error);
    request.log.error({ err: error, errorCode: internal.code }, 'request failed');
    return reply.code(500).header('x-error-code', internal.code).send(internal.body());
  });
}

export default fp(errors, { name: 'errors' });
