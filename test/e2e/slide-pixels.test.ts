// The tiles tile-infer sends, made on the reader pool, against tiles cut the way the client cut
// them before the pool (libvips' TIFF reader for the region, then a 2x2 box average or libvips'
// linear reduction): the same pixels in every request body, on generated TIFF and SVS slides at
// 0.5 and 0.25 MPP, with JPEG (4:4:4, 4:2:0, shared tables), LZW and deflate tiles, JPEG tiles
// decoded by libturbojpeg and by libvips. And each TIFF tile is decoded once.
import { join } from 'node:path';
import sharp from 'sharp';
import t from 'tap';
import { tileGrid } from '../../src/client/pipeline/grid.js';
import { ReaderPool } from '../../src/client/pipeline/reader-pool.js';
import { tileBodies } from '../../src/client/pipeline/tile-reader.js';
import { tileSpan } from '../../src/client/slide/bands.js';
import { openSlide } from '../../src/client/slide/open.js';
import { tileRegion } from '../../src/client/slide/region.js';
import type { Slide } from '../../src/client/slide/slide.js';
import { hasTurboJpeg } from '../../src/client/slide/turbojpeg.js';
import { renderLevel0, writeSlide, type SlideSpec } from '../../tools/synthetic/slide.js';
import { tempDir } from '../../tools/temp-dir.js';
import { unwriteTiles } from '../../tools/synthetic/tiff-tags.js';

const dir = tempDir('slide-pixels');
const SIZE = 224;
const spec = (format: 'tiff' | 'svs', mpp: number, extra: Partial<SlideSpec> = {}): SlideSpec => ({
  widthUm: 480,
  heightUm: 360,
  mpp,
  seed: 9,
  format,
  islands: [{ cx: 240, cy: 180, rx: 200, ry: 140 }],
  ...extra,
});

/** The tile the client sent before the reader pool, from libvips' TIFF reader. */
async function referenceTile(slide: Slide, path: string, x: number, y: number, extent: number): Promise<Buffer> {
  const { level, region: r } = tileRegion(slide, x, y, extent, SIZE);
  const page = (slide as unknown as { pyramid: { page: number }[] }).pyramid[level].page;
  const l = slide.levels[level];
  const region = Buffer.alloc(r.w * r.h * 3, 255);
  const [w, h] = [Math.min(r.w, l.width - r.x), Math.min(r.h, l.height - r.y)];
  const cut = await sharp(path, { page })
    .extract({ left: r.x, top: r.y, width: w, height: h })
    .removeAlpha()
    .raw()
    .toBuffer();
  for (let row = 0; row < h; row++) cut.copy(region, row * r.w * 3, row * w * 3, (row + 1) * w * 3);
  if (r.w === SIZE) return region;
  if (r.w !== 2 * SIZE)
    return sharp(region, { raw: { width: r.w, height: r.h, channels: 3 } })
      .resize(SIZE, SIZE, { kernel: 'linear', fit: 'fill' })
      .raw()
      .toBuffer();
  const out = Buffer.alloc(SIZE * SIZE * 3);
  const at = (px: number, py: number, c: number) => region[(py * r.w + px) * 3 + c];
  for (let py = 0; py < SIZE; py++)
    for (let px = 0; px < SIZE; px++)
      for (let c = 0; c < 3; c++)
        out[(py * SIZE + px) * 3 + c] =
          (at(2 * px, 2 * py, c) +
            at(2 * px + 1, 2 * py, c) +
            at(2 * px, 2 * py + 1, c) +
            at(2 * px + 1, 2 * py + 1, c) +
            2) >>
          2;
  return out;
}

/** Every whole tile of the grid (the mask says tissue everywhere). */
function everyTile(slide: Slide, mpp: number, tileMpp: number) {
  const l0 = slide.levels[0];
  const mask = {
    width: Math.ceil((l0.width * mpp) / 8),
    height: Math.ceil((l0.height * mpp) / 8),
    mask: new Uint8Array(1e6).fill(1),
  };
  return tileGrid({ width: l0.width, height: l0.height, mpp0: mpp, tileSize: SIZE, tileMpp, mask, minTissue: 0 });
}

const pools = {
  turbojpeg: new ReaderPool(2),
  libvips: new ReaderPool(2, { ...process.env, TILE_INFER_TURBOJPEG: '0' }),
};
t.teardown(() => Promise.all(Object.values(pools).map((p) => p.close())));

const cases: { name: string; write: (path: string) => Promise<unknown>; ext: string; mpp: number; tileMpp: number }[] =
  [
    {
      name: 'TIFF, 0.5 MPP, JPEG 4:4:4',
      write: (p) => writeSlide(p, spec('tiff', 0.5)),
      ext: 'tif',
      mpp: 0.5,
      tileMpp: 0.5,
    },
    {
      name: 'SVS, 0.25 MPP, JPEG with shared tables, reduced 2x',
      write: (p) => writeSlide(p, spec('svs', 0.25)),
      ext: 'svs',
      mpp: 0.25,
      tileMpp: 0.5,
    },
    {
      name: 'TIFF, 0.25 MPP, JPEG 4:2:0, reduced 2x',
      write: (p) => writeSlide(p, spec('tiff', 0.25, { chroma: '4:2:0', tileSize: 240 })),
      ext: 'tif',
      mpp: 0.25,
      tileMpp: 0.5,
    },
    {
      name: 'SVS, 0.5 MPP 4:2:0, tiles at 0.74 MPP (a linear reduction)',
      write: (p) => writeSlide(p, spec('svs', 0.5, { chroma: '4:2:0' })),
      ext: 'svs',
      mpp: 0.5,
      tileMpp: 0.74,
    },
    ...(['lzw', 'deflate'] as const).map((compression) => ({
      name: `TIFF, 0.25 MPP, ${compression}, reduced 2x`,
      write: async (p: string) => {
        const r = renderLevel0(spec('tiff', 0.25));
        await sharp(r.rgb, { raw: { width: r.width, height: r.height, channels: 3 } })
          .tiff({
            tile: true,
            tileWidth: 256,
            tileHeight: 256,
            compression,
            pyramid: true,
            xres: 4000,
            yres: 4000,
            resolutionUnit: 'cm',
          })
          .toFile(p);
      },
      ext: 'tif',
      mpp: 0.25,
      tileMpp: 0.5,
    })),
  ];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const path = join(dir, `${c.name.replace(/\W+/g, '-')}.${c.ext}`);
    await c.write(path);
    const slide = await openSlide(path);
    t.teardown(() => slide.close());
    t.equal(slide.mpp, c.mpp);
    const grid = everyTile(slide, c.mpp, c.tileMpp);
    t.ok(grid.tiles.length >= 4, `${grid.tiles.length} tiles`);
    const expected = await Promise.all(
      grid.tiles.map((tile) => referenceTile(slide, path, tile.x, tile.y, grid.extent)),
    );
    for (const [decoder, pool] of Object.entries(pools)) {
      if (decoder === 'turbojpeg' && !hasTurboJpeg()) continue;
      const fields = (tile: { x: number; y: number; idx: number }) => ({
        slide_name: 's',
        x: tile.x,
        y: tile.y,
        width: SIZE,
        height: SIZE,
        patch_idx: tile.idx,
        resolution: c.tileMpp,
      });
      // The same pixels in both bodies tile-infer makes: the contract's JSON, and raw RGB.
      for (const type of ['application/json', 'application/octet-stream'] as const) {
        let same = 0;
        let k = 0;
        const read = { pool, type, slide, tiles: grid.tiles, extent: grid.extent, size: SIZE, fields };
        for await (const { tile, body } of tileBodies(read)) {
          let pixels = body.bytes;
          if (type === 'application/json') {
            const { image_data, ...rest } = JSON.parse(body.bytes.toString('latin1')) as { image_data: string };
            t.same(rest, fields(tile));
            pixels = await sharp(Buffer.from(image_data, 'base64')).raw().toBuffer();
          } else t.same(body.fields, fields(tile));
          if (pixels.equals(expected[k++])) same++;
        }
        t.equal(same, grid.tiles.length, `${decoder}, ${type}: every tile's pixels as before`);
      }
    }
  });
}

t.test('each TIFF tile the tiles need is decoded once, and no other', async (t) => {
  const path = join(dir, 'once.svs');
  await writeSlide(path, { ...spec('svs', 0.25), tileSize: 128 });
  const slide = await openSlide(path);
  t.teardown(() => slide.close());
  // Every other tile of the grid: gaps between the tiles, TIFF tiles shared by neighbours.
  const grid = everyTile(slide, 0.25, 0.5);
  const tiles = grid.tiles.filter((g) => g.idx % 3 !== 1);
  const pool = pools.turbojpeg;
  const decoded: string[] = [];
  const decode = pool.decode.bind(pool);
  pool.decode = (task) => {
    for (let k = 0; k < task.job.tiles; k++)
      decoded.push(`${task.job.left / task.job.tileWidth + k},${task.job.top / task.job.tileHeight}`);
    return decode(task);
  };
  t.teardown(() => void (pool.decode = decode));
  let n = 0;
  const fields = () => ({ slide_name: 's', x: 0, y: 0, width: SIZE, height: SIZE, patch_idx: 0 });
  const type = 'application/octet-stream';
  for await (const _ of tileBodies({ pool, type, slide, tiles, extent: grid.extent, size: SIZE, fields })) n++;
  t.equal(n, tiles.length);
  const needed = new Set<string>();
  for (const g of tiles) {
    const { region } = tileRegion(slide, g.x, g.y, grid.extent, SIZE);
    const [tx0, tx1, ty0, ty1] = tileSpan(slide.bandSource!(0), region);
    for (let ty = ty0; ty < ty1; ty++) for (let tx = tx0; tx < tx1; tx++) needed.add(`${tx},${ty}`);
  }
  t.equal(decoded.length, new Set(decoded).size, `${decoded.length} TIFF tiles decoded, none twice`);
  t.same(new Set(decoded), needed, 'exactly those the tiles need');
});

t.test("an SVS's tiles never written below level 0: the tiles sent draw them as the slide's regions do", async (t) => {
  // Level 1 (directory 2) of a 2400 x 1800 px SVS, read for 224 px tiles at 2 µm/px: its tile 1
  // (in the tissue) never written, drawn from level 0 (test/e2e/slide-sparse.test.ts checks that
  // drawing against OpenSlide's).
  const path = join(dir, 'holes.svs');
  await writeSlide(path, {
    ...spec('svs', 0.5),
    widthUm: 1200,
    heightUm: 900,
    islands: [{ cx: 600, cy: 450, rx: 420, ry: 300 }],
  });
  unwriteTiles(path, [1], 2);
  const slide = await openSlide(path);
  t.teardown(() => slide.close());
  const grid = everyTile(slide, 0.5, 2);
  t.ok(grid.tiles.length >= 4, `${grid.tiles.length} tiles`);
  const fields = () => ({ slide_name: 's', x: 0, y: 0, width: SIZE, height: SIZE, patch_idx: 0 });
  const type = 'application/octet-stream';
  for (const [decoder, pool] of Object.entries(pools)) {
    if (decoder === 'turbojpeg' && !hasTurboJpeg()) continue;
    let same = 0;
    for await (const { tile, body } of tileBodies({
      pool,
      type,
      slide,
      tiles: grid.tiles,
      extent: grid.extent,
      size: SIZE,
      fields,
    })) {
      const { level, region: r } = tileRegion(slide, tile.x, tile.y, grid.extent, SIZE);
      t.equal(level, 1);
      const expected = Buffer.from(await slide.readRegion(level, r.x, r.y, r.w, r.h));
      if (body.bytes.equals(expected)) same++;
    }
    t.equal(same, grid.tiles.length, `${decoder}: every tile as the slide's region reads`);
  }
});
