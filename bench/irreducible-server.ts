// The irreducible work of a tile request, as a plain Node server: read the body, JSON.parse,
// base64-decode, inflate the PNG's image data natively, answer a small JSON; one process per core
// (node:cluster). A service can only approach it: the benchmark reports the service's tiles/s as
// a ratio of this server's, measured in the same run.
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
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const pixels = inflateSync(idat(Buffer.from(body.image_data, 'base64')));
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ output: [pixels.length], slide_name: body.slide_name, x: body.x, y: body.y, width: body.width, height: body.height, patch_idx: body.patch_idx }));
    });
  }).listen(port, '127.0.0.1', () => process.send?.('listening'));
}
