// What /docs shows of a model's routes: its tile size and MPP, what `output` holds (length,
// genes), the three bodies it takes, and a request that works when sent from the page (a flat
// H&E-pink tile of the model's size, a few hundred bytes as PNG; a placeholder for very large tiles).
import { PNG } from 'pngjs';
import type { SwaggerTransform } from '@fastify/swagger';
import type { TObject } from 'typebox';
import type { Manifest, Task } from '../model-package/manifest.js';
import { TileRequest } from '../contract/schemas.js';
import { tileQueryParameters } from './tile-query.js';

export function describeRoute(name: string, manifest: Manifest | null, task: Task): string {
  if (!manifest) return `${name}: its manifest could not be read at start; GET /api/models says why.`;
  const { tile, genes } = manifest;
  const takes = `Takes ${tile.width}x${tile.height} px tiles at ${tile.mpp} MPP (±${Math.round(tile.mpp_tolerance * 100)}%).`;
  const untrained = manifest.provenance.trained ? '' : ' Weights NOT TRAINED: outputs carry no biological meaning.';
  if (task === 'segmentation')
    return `${takes} \`output\`: the tissue mask, ${tile.width * tile.height} values of 0 or 1 (row-major); \`tissue_ratio\` its tissue fraction unless sent.${untrained}`;
  if (task === 'embedding')
    return `${takes} \`output\`: the embedding, ${manifest.embedding_dim ?? '?'} values.${untrained}`;
  const outputs = genes
    ? `${genes.output.length} values, one per gene: ${genes.output.join(', ')}`
    : 'the prediction vector';
  const bulk = genes
    ? ` Optional \`bulk_rna\`: ${genes.input.length} counts, one per input gene (${genes.panel}: ${genes.input.join(', ')}), transformed with ${genes.bulk_transform}; omitted, zeros.`
    : '';
  return `${takes} \`output\`: ${outputs}.${bulk}${untrained}`;
}

/** The bodies a model route takes, with a curl line for each binary one. */
export function describeBodies(path: string, manifest: Manifest | null): string {
  const example = exampleRequest(manifest);
  const { width, height } = manifest?.tile ?? { width: 'width', height: 'height' };
  const query = Object.entries(example ?? { slide_name: 's', x: 0, y: 0, width, height, patch_idx: 0 })
    .filter(([k]) => k !== 'image_data')
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const curl = (file: string, type: string) =>
    `    curl --data-binary @${file} -H 'Content-Type: ${type}' 'http://localhost:8000${path}?${query}'`;
  return [
    "Three request bodies, by Content-Type: `application/json`, the contract's ModelRequest (image_data a base64 PNG); `image/png`, the PNG file itself;",
    `\`application/octet-stream\`, the tile's raw pixels, uint8 RGB, row-major, ${width} x ${height} x 3 bytes. With the last two the fields are query`,
    'parameters of the same names (bulk_rna comma-separated); the answer is the same ModelResponse.\n\n',
    `${curl('tile.png', 'image/png')}\n${curl('tile.rgb', 'application/octet-stream')}`,
  ].join(' ');
}

/** What /docs shows of a model route's request: the contract's JSON body with the model's
 *  example, or a PNG file or raw pixels with the fields in the query (route validation sees the
 *  parsed body instead: src/front/tile-image.ts). */
export function requestDocs(manifest: Manifest | null, query: TObject | null): SwaggerTransform {
  const example = exampleRequest(manifest);
  const binary = (description: string) => ({ schema: { type: 'string', format: 'binary', description } });
  const body = {
    content: {
      'application/json': { schema: example ? { ...TileRequest, examples: [example] } : TileRequest },
      'image/png': binary('The tile as a PNG file; its fields in the query'),
      'application/octet-stream': binary(
        "The tile's raw pixels: uint8 RGB, row-major, width x height x 3 bytes; its fields in the query",
      ),
    },
  };
  const querystring = { type: 'object', properties: { ...query?.properties, ...tileQueryParameters(example) } };
  return ({ schema, url }) => ({ schema: { ...schema, body, querystring }, url });
}

const PINK = [232, 186, 214];
/** Tiles up to this size get a full example PNG (1024x1024: ~4 MiB of RGBA for pngjs, ~80 ms).
 *  Larger ones (the manifest allows up to 16384 px a side) get a placeholder: every front builds
 *  the examples at start, and a front must not die or stall on one package's tile size. */
export const EXAMPLE_MAX_PIXELS = 1024 * 1024;

/** Each tile size's example PNG, in base64: every route of every model and each front's start
 *  asks for it, and pngjs takes ~20 ms to write a 512 px one. */
const examplePngs = new Map<string, string>();

function examplePng(width: number, height: number): string {
  if (!(width * height <= EXAMPLE_MAX_PIXELS))
    return `(a base64 PNG of ${width}x${height} px: too large for an example here)`;
  const key = `${width}x${height}`;
  let png = examplePngs.get(key);
  if (!png) {
    const image = new PNG({ width, height, colorType: 2 });
    for (let i = 0; i < width * height; i++) image.data.set([...PINK, 255], i * 4);
    png = PNG.sync.write(image, { colorType: 2 }).toString('base64');
    examplePngs.set(key, png);
  }
  return png;
}

export function exampleRequest(manifest: Manifest | null): TileRequest | undefined {
  if (!manifest) return undefined;
  const { width, height, mpp } = manifest.tile;
  return {
    image_data: examplePng(width, height),
    slide_name: 'example-slide',
    x: 0,
    y: 0,
    width,
    height,
    patch_idx: 0,
    resolution: mpp,
  };
}
