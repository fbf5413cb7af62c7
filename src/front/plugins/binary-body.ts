// Binary tile bodies beside the JSON contract: `image/png`, the tile's PNG file itself, and
// `application/octet-stream`, its raw pixels (uint8 RGB, row-major, width x height x 3 bytes),
// with the tile's fields as query parameters. Each parser hands the route what a JSON tile's
// gives: the fields (tile-query.ts) and image_data holding the image (tile-image.ts), so one
// schema, one set of checks and one handler serve the three. Body limits apply as to JSON.
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { tileFieldsFromQuery } from '../tile-query.js';
import { pngImage, rgbImage, type TileImage } from '../tile-image.js';

const IMAGES: Record<string, (bytes: Buffer) => TileImage> = {
  'image/png': (bytes) => pngImage(bytes, 'body'),
  'application/octet-stream': rgbImage,
};

async function binaryBody(app: FastifyInstance): Promise<void> {
  for (const [type, image] of Object.entries(IMAGES)) {
    app.addContentTypeParser(type, { parseAs: 'buffer' }, (request, body, done) => {
      done(null, {
        ...tileFieldsFromQuery(request.query as Record<string, string | string[]>),
        image_data: image(body as Buffer),
      });
    });
  }
}

export default fp(binaryBody, { name: 'binary-body' });
