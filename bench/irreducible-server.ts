// The irreducible work of a tile request, as a plain Node server, per body type: read the body;
// read the fields (JSON.parse of a JSON body, the query string of a binary one); get the pixels
// (base64 and a native inflate of the PNG's image data for JSON, the inflate alone for a PNG body,
// nothing for raw RGB, which only has its length checked); answer a small JSON; one process per
// core (node:cluster). A service can only approach it: the benchmark reports the service's tiles/s
// for each body type as a ratio of this server's for the same body type, measured in the same run.
//   node dist/bench/irreducible-server.js PORT
import cluster from 'node:cluster';
import { createServer } from 'node:http';
import { availableParallelism } from 'node:os';
import { inflateSync } from 'node:zlib';

const port = Number(process.argv[2] ?? 0);

/** The IDAT chunks of a PNG, concatenated. */
function idat(png: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let pos = 8; pos + 8 <= png.length; ) {
    const length = png.readUInt32BE(pos);
    if (png.toString('latin1', pos + 4, pos + 8) === 'IDAT') parts.push(png.subarray(pos + 8, pos + 8 + length));
    pos += 12 + length;
  }
  return Buffer.concat(parts);
}

type Fields = Record<string, unknown>;

/** The fields and the number of pixel bytes the request carries, by its Content-Type. */
function readTile(type: string | undefined, url: string, body: Buffer): { fields: Fields; pixels: number } {
  if (type === 'application/json') {
    const fields = JSON.parse(body.toString('utf8'));
    return { fields, pixels: inflateSync(idat(Buffer.from(fields.image_data, 'base64'))).length };
  }
  const query = new URL(url, 'http://x').searchParams;
  const fields: Fields = {
    slide_name: query.get('slide_name'),
    x: Number(query.get('x')),
    y: Number(query.get('y')),
    width: Number(query.get('width')),
    height: Number(query.get('height')),
    patch_idx: Number(query.get('patch_idx')),
  };
  if (type === 'image/png') return { fields, pixels: inflateSync(idat(body)).length };
  if (body.length !== (fields.width as number) * (fields.height as number) * 3)
    throw new Error('raw body of the wrong length');
  return { fields, pixels: body.length };
}

if (cluster.isPrimary) {
  for (let i = 0; i < availableParallelism(); i++) cluster.fork();
  process.on('SIGTERM', () => {
    for (const w of Object.values(cluster.workers ?? {})) w?.kill();
    process.exit(0);
  });
} else {
  createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const { fields, pixels } = readTile(req.headers['content-type'], req.url ?? '/', Buffer.concat(chunks));
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          output: [pixels],
          slide_name: fields.slide_name,
          x: fields.x,
          y: fields.y,
          width: fields.width,
          height: fields.height,
          patch_idx: fields.patch_idx,
        }),
      );
    });
  }).listen(port, '127.0.0.1', () => process.send?.('listening'));
}
