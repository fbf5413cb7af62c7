// Bodies as FastAPI reads them: without a Content-Type the body is parsed as JSON (by the JSON
// body's parser); with any type but JSON (text/plain, form data...) the raw text becomes the body,
// which then fails the schema with a 422 model_attributes_type at ["body"], instead of fastify's
// 415 in another shape.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { type JsonBodyOptions, parseJsonBody } from './json-body.js';

async function nonJsonBody(app: FastifyInstance, { values }: JsonBodyOptions): Promise<void> {
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    if (request.headers['content-type'] !== undefined) return done(null, (body as Buffer).toString('utf8'));
    try {
      done(null, parseJsonBody(body as Buffer, values(request)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}

export default fp(nonJsonBody, { name: 'non-json-body' });
