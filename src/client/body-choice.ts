// Which body a tile goes to each server in, as its GET /api/models says its model takes: raw RGB,
// else the PNG file, else the contract's JSON (older servers, and fields too long for a query).
import { TILE_BODY_TYPES, type TileBodyType } from '../contract/endpoints.js';
import type { TileFields, TileRequest } from '../contract/schemas.js';
import { encodeRgbPng } from '../tile/png-write.js';
import type { Outgoing, Server } from './failover.js';
import { tileQuery, tileRequestBody, withQuery, type MadeBody } from './tile-body.js';
import { UsageError } from './usage-error.js';

/** A tile for inferTile: its fields, and its image as raw pixels (uint8 RGB, row-major, width x
 *  height x 3 bytes) or as PNG bytes. */
export type TileInput = { fields: TileFields } & (
  | { rgb: Uint8Array; png?: undefined }
  | { png: Uint8Array; rgb?: undefined }
);

/** The longest query a binary body's fields may make; longer ones (a bulk_rna of thousands of
 *  genes) go in the JSON body. Node's HTTP server refuses over 16 KiB of headers (431), nginx
 *  a request line over 8 KiB. */
const MAX_QUERY = 4096;

/** A made body's request to an endpoint path: a binary body's fields go in the query. */
function outgoing(path: string, made: MadeBody): Outgoing {
  if (made.type === 'application/json') return { path, body: made.bytes, contentType: made.type };
  return { path: withQuery(path, tileQuery(made.fields)), body: made.bytes, contentType: made.type };
}

/** One tile's request to an endpoint path, the same for every server: the contract's JSON object,
 *  or a body made ahead (tile-body.ts). */
export const requestOf = (path: string, request: TileRequest | MadeBody): Outgoing =>
  'bytes' in request ? outgoing(path, request) : { path, body: Buffer.from(JSON.stringify(request)) };

/** The model of a model endpoint's path (`/api/embed/tile-embed?...`). */
function modelOf(path: string): string | undefined {
  const name = /^\/api\/(?:predict|embed)\/([^/?]+)/.exec(path)?.[1];
  return name && decodeURIComponent(name);
}

/** The bodies each server's models take, asked once per server. */
export class BodyChoice {
  /** The request bodies each model takes (GET /api/models), once read. */
  private readonly asked = new Map<Server, Promise<Map<string, Set<string>>>>();

  /** With `bodies: 'json'` every tile goes as the contract's JSON, whatever the servers take. */
  constructor(
    private readonly servers: readonly Server[],
    private readonly bodies: 'auto' | 'json' = 'auto',
  ) {}

  /** A tile given as pixels or PNG bytes, as the request for the server an attempt goes to: raw
   *  RGB pixels, the PNG file, or the contract's JSON (always, for fields too long for a query).
   *  A PNG is made from pixels only for a server that needs one, once. */
  forTile(path: string, tile: TileInput): (server: Server) => Promise<Outgoing> {
    const { width, height } = tile.fields;
    if (tile.rgb && tile.rgb.length !== width * height * 3)
      throw new UsageError(
        'TILE_ERR_CLIENT_USAGE',
        `raw pixels of a ${width}x${height} tile are ${width * height * 3} bytes (uint8 RGB), not ${tile.rgb.length}`,
      );
    const model = modelOf(path);
    let png = tile.png;
    const pngOf = () => (png ??= encodeRgbPng(tile.rgb!, width, height));
    const bytes = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    const queryFits = tileQuery(tile.fields).length <= MAX_QUERY;
    return async (server) => {
      const takes = model && queryFits ? (await this.bodyTypesOf(server)).get(model) : undefined;
      if (tile.rgb && takes?.has('application/octet-stream'))
        return outgoing(path, { type: 'application/octet-stream', bytes: bytes(tile.rgb), fields: tile.fields });
      if (takes?.has('image/png'))
        return outgoing(path, { type: 'image/png', bytes: bytes(pngOf()), fields: tile.fields });
      return outgoing(path, {
        type: 'application/json',
        bytes: tileRequestBody(pngOf(), tile.fields),
        fields: tile.fields,
      });
    };
  }

  /** The bodies every server takes for an endpoint path's model (the contract's JSON at least). */
  async everyServerTakes(path: string): Promise<Set<TileBodyType>> {
    const model = modelOf(path);
    const each = await Promise.all(
      this.servers.map(async (s) => (model ? (await this.bodyTypesOf(s)).get(model) : undefined) ?? new Set<string>()),
    );
    return new Set(
      TILE_BODY_TYPES.filter((type) => type === 'application/json' || each.every((takes) => takes.has(type))),
    );
  }

  /** The bodies each of a server's models takes, from its GET /api/models (read once); none for a
   *  server that does not say (an older one: JSON only), or with `bodies: 'json'`. A server that
   *  cannot be asked now is asked again on the next tile. */
  private bodyTypesOf(server: Server): Promise<Map<string, Set<string>>> {
    if (this.bodies === 'json') return Promise.resolve(new Map());
    let asked = this.asked.get(server);
    if (!asked) {
      asked = (async () => {
        const res = await server.pool.request({
          method: 'GET',
          path: '/api/models',
          headersTimeout: 10_000,
          bodyTimeout: 10_000,
        });
        const text = await res.body.text();
        // A 5xx (under pressure, a balancer with no backend up) says nothing of the bodies: ask again.
        if (res.statusCode >= 500) throw new Error(`GET /api/models: ${res.statusCode}`);
        const takes = new Map<string, Set<string>>();
        let models: { name: string; content_types?: string[] }[] = [];
        try {
          if (res.statusCode === 200) models = (JSON.parse(text) as { models?: typeof models }).models ?? [];
        } catch {
          // not the list: the server says nothing of its bodies
        }
        for (const m of models) takes.set(m.name, new Set(m.content_types ?? []));
        return takes;
      })().catch(() => {
        this.asked.delete(server);
        return new Map();
      });
      this.asked.set(server, asked);
    }
    return asked;
  }
}
