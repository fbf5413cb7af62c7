// A query string whose percent-encoding is invalid (`%zz`, a lone `%`, bytes that are not UTF-8)
// is a 422 naming it, before anything else: the lenient parser would pass it on as other text.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../../lib/errors.js';

/** The first parameter of `query` whose percent-encoding does not decode, or null. */
export function badlyEncoded(query: string): string | null {
  for (const part of query.split('&')) {
    try {
      decodeURIComponent(part.replaceAll('+', ' '));
    } catch {
      return part;
    }
  }
  return null;
}

async function queryEncoding(app: FastifyInstance): Promise<void> {
  app.addHook('onRequest', async (request) => {
    const at = request.url.indexOf('?');
    if (at < 0 || !request.url.includes('%', at)) return;
    const part = badlyEncoded(request.url.slice(at + 1));
    if (part !== null)
      throw errors.tileInvalid([
        {
          loc: ['query'],
          msg: 'Value error, the query string has invalid percent-encoding (% and two hex digits of UTF-8)',
          type: 'value_error',
          input: part,
        },
      ]);
  });
}

export default fp(queryEncoding, { name: 'query-encoding', dependencies: ['errors'] });
