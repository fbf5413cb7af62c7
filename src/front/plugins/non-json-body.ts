// Bodies as FastAPI reads them: without a Content-Type the body is parsed as JSON; with any type
// but JSON (text/plain, form data...) the raw text becomes the body, which then fails the schema
// with a 422 model_attributes_type at ["body"], instead of fastify's 415 in another shape.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

async function nonJsonBody(app: FastifyInstance): Promise<void> {
  const json = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, body, done) => {
    if (request.headers['content-type'] === undefined) return json(request, body as string, done);
    done(null, body);
  });
}

export default fp(nonJsonBody, { name: 'non-json-body' });
