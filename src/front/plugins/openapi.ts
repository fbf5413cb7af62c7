// GET /openapi.json, built from the routes' TypeBox schemas, and Swagger UI at /docs (its assets
// come from the npm package, not a CDN).
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';

async function openapi(app: FastifyInstance, { version }: { version: string }): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Tile Inference Service',
        version,
        description:
          'Tissue segmentation, gene-expression prediction and tile embeddings for whole-slide image tiles. No authentication: protect at network level.',
      },
      tags: [{ name: 'Models' }, { name: 'Health' }, { name: 'Diagnostics' }],
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

export default fp(openapi, { name: 'openapi' });
