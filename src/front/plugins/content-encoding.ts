// Bodies are read as sent: a request whose body has a Content-Encoding other than identity (gzip,
// deflate, br) is refused with 415 and Accept-Encoding: identity, before admission and before the
// body is read, instead of being parsed as if it were not encoded (a 422 json_invalid that hid
// the reason). Decompressing would buy little for tiles (a PNG is deflated already, its base64
// compresses by about a quarter, and raw pixels are the body meant for speed) at the cost of front
// CPU per tile and a second bound to keep against gzip bombs.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../../lib/errors.js';

async function contentEncoding(app: FastifyInstance): Promise<void> {
  app.addHook('onRequest', async (request, reply) => {
    const encoding = request.headers['content-encoding']?.trim().toLowerCase();
    const hasBody =
      request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length'] ?? 0) > 0;
    if (!encoding || encoding === 'identity' || !hasBody) return;
    reply.header('accept-encoding', 'identity');
    throw errors.unsupportedContentEncoding(encoding);
  });
}

export default fp(contentEncoding, { name: 'content-encoding', dependencies: ['errors'] });
