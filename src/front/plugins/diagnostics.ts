// GET /diagnostics: the supervisor's anonymized payload (supervisor/diagnostics/payload.ts), relayed.
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { ModelBackend } from '../backend.js';
import { errors } from '../../lib/errors.js';
import { HTTPValidationError } from '../../contract/schemas.js';
import { requireAdminToken } from '../admin-token.js';
import { literalItem } from '../validation-error.js';

const CATEGORIES = ['usage', 'diagnostics'] as const;
const Query = Type.Object({
  categories: Type.Optional(
    Type.String({
      description:
        "Comma-separated: 'usage' (recent model-request usage entries) and/or 'diagnostics' (the full payload under a 'diagnostics' key). Omitted: the full payload at the top level.",
    }),
  ),
});

export default async function diagnostics(
  app: FastifyInstance,
  { backend, token }: { backend: ModelBackend; token: string | null },
): Promise<void> {
  app.get(
    '/diagnostics',
    {
      schema: {
        tags: ['Diagnostics'],
        summary: 'Anonymized diagnostics and usage',
        querystring: Query,
        response: { 422: HTTPValidationError },
      },
      preHandler: requireAdminToken(token),
    },
    async (request) => {
      const raw = (request.query as { categories?: string }).categories;
      const wanted = raw === undefined ? [] : raw.split(',').map((s) => s.trim());
      if (wanted.some((c) => !(CATEGORIES as readonly string[]).includes(c))) {
        throw errors.tileInvalid([literalItem(['query', 'categories'], [...CATEGORIES], raw, ' (comma-separated)')]);
      }
      return backend.diagnostics(wanted);
    },
  );
}
