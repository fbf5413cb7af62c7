// The JSON body parser. fastify's default (secure-json-parse) runs two regular expressions over
// the whole text of every body to find "__proto__" and "constructor": on a tile, hundreds of
// kilobytes of base64, that was the largest single cost in a front's profile (11% of its CPU).
// A tile request is a flat object whose fields the schema names, so the same protection is
// dropping those two keys from the top level, whatever the text's size.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

const FORBIDDEN = ['__proto__', 'constructor'];

export function parseJsonBody(text: string): unknown {
  const value = JSON.parse(text);
  if (value !== null && typeof value === 'object') for (const key of FORBIDDEN) if (Object.hasOwn(value, key)) delete value[key];
  return value;
}

async function jsonBody(app: FastifyInstance): Promise<void> {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody((body as Buffer).toString('utf8')));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}

export default fp(jsonBody, { name: 'json-body' });
