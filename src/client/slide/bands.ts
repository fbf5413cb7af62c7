// Bands: runs of TIFF tiles of one tile row, the unit in which a TIFF or SVS level is decoded.
// The main thread plans which bands the tiles to come need (each band once, however many tiles
// share it); a reader-pool thread decodes each into shared memory (decodeBand), and any thread
// then cuts tiles' regions out of them (cutRegion).
import { closeSync, openSync, readSync } from 'node:fs';
import sharp from 'sharp';
import { decodeJpegInto, hasTurboJpeg, jpegHeader, JPEG_RGB, JPEG_YCBCR } from './turbojpeg.js';
import type { BandJob, BandSource, Region } from './slide.js';

export const JPEG = 7;

/** A decoded band as threads share it: whole TIFF tiles side by side (`stride` bytes a row),
 *  of which `width` x `height` at (left, top) of the level are valid. */
export interface BandView {
  data: SharedArrayBuffer;
  left: number;
  top: number;
  width: number;
  height: number;
  stride: number;
}

export interface BandKey {
  ty: number;
  tx0: number;
  tx1: number;
}

/** Band width to aim at, in TIFF tiles: a decode task's fixed cost is spread over 8 tiles, and a
 *  band still holds little glass beside the tissue. */
export const TILES_PER_BAND = 8;

/** Tile columns [tx0, tx1) and rows [ty0, ty1) of a level that a region overlaps. */
export function tileSpan(l: BandSource, r: Region): [number, number, number, number] {
  return [
    Math.max(0, Math.floor(r.x / l.tileWidth)),
    Math.min(l.tilesAcross, Math.ceil((r.x + r.w) / l.tileWidth)),
    Math.max(0, Math.floor(r.y / l.tileHeight)),
    Math.min(l.tilesDown, Math.ceil((r.y + r.h) / l.tileHeight)),
  ];
}

/** The bands that each group of regions needs: per tile row, runs of needed tiles at most
 *  TILES_PER_BAND wide, so that no TIFF tile is decoded twice and none that no region needs. */
export function planBands(
  l: BandSource,
  groups: readonly (readonly Region[])[],
): { bands: BandKey[]; uses: number[][] } {
  const needed = new Map<number, Uint8Array>();
  for (const group of groups) {
    for (const r of group) {
      const [tx0, tx1, ty0, ty1] = tileSpan(l, r);
      for (let ty = ty0; ty < ty1; ty++) {
        let row = needed.get(ty);
        if (!row) needed.set(ty, (row = new Uint8Array(l.tilesAcross)));
        row.fill(1, tx0, tx1);
      }
    }
  }
  const bands: BandKey[] = [];
  /** Per tile row, the band index holding each tile. */
  const bandOf = new Map<number, Int32Array>();
  for (const [ty, row] of needed) {
    const of = new Int32Array(l.tilesAcross).fill(-1);
    for (let tx = 0; tx < l.tilesAcross; ) {
      if (!row[tx]) {
        tx++;
        continue;
      }
      let end = tx;
      while (end < l.tilesAcross && row[end] && end - tx < TILES_PER_BAND) end++;
      of.fill(bands.length, tx, end);
      bands.push({ ty, tx0: tx, tx1: end });
      tx = end;
    }
    bandOf.set(ty, of);
  }
  const uses = groups.map((group) => {
    const set = new Set<number>();
    for (const r of group) {
      const [tx0, tx1, ty0, ty1] = tileSpan(l, r);
      for (let ty = ty0; ty < ty1; ty++) for (let tx = tx0; tx < tx1; tx++) set.add(bandOf.get(ty)![tx]);
    }
    return [...set];
  });
  return { bands, uses };
}

export const bandBytes = (job: BandJob) => job.tiles * job.tileWidth * job.tileHeight * 3;

/** The view of a band job's pixels once decoded into `data`. */
export const bandView = (job: BandJob, data: SharedArrayBuffer): BandView => ({
  data,
  left: job.left,
  top: job.top,
  width: job.width,
  height: job.height,
  stride: job.tiles * job.tileWidth * 3,
});

/** Open files of this thread, a few at a time (slides in flight). */
const files = new Map<string, number>();
export function fileOf(path: string): number {
  let fd = files.get(path);
  if (fd === undefined) {
    fd = openSync(path, 'r');
    files.set(path, fd);
    if (files.size > 8) {
      const [oldest, old] = files.entries().next().value!;
      files.delete(oldest);
      closeSync(old);
    }
  }
  return fd;
}

let scratch = Buffer.alloc(0);

/** Paints tile `k` of a band white: a tile never written (TileByteCounts 0, as sparse files
 *  have) is background, as OpenSlide draws one at an SVS's level 0 (transparent, over white). */
export function paintBackground(job: BandJob, into: Uint8Array, k: number): void {
  const row = job.tileWidth * 3;
  const stride = job.tiles * row;
  for (let y = 0; y < job.tileHeight; y++) into.fill(255, k * row + y * stride, (k + 1) * row + y * stride);
}

/** Whether tile `k` of a JPEG band was never written (TileByteCounts 0). */
const unwritten = (job: BandJob, k: number) => job.jpeg!.ranges[k * 2 + 1] === 0;

/** A tile's JPEG stream from the file, with the level's tables spliced in front of an abbreviated
 *  one (tables less their EOI, then the stream less its SOI), in a reused buffer. */
function readStream(job: BandJob, k: number): Buffer {
  const { tables, ranges } = job.jpeg!;
  const [offset, length] = [ranges[k * 2], ranges[k * 2 + 1]];
  // A tile's stream is smaller than its pixels: a length past that is a damaged file, not a
  // size to allocate.
  if (!(length >= 4 && length <= job.tileWidth * job.tileHeight * 3 + 65536))
    throw new Error(`a JPEG stream of ${length} bytes`);
  const head = tables ? tables.length - 4 : 0;
  if (scratch.length < head + length) scratch = Buffer.allocUnsafe(2 * (head + length));
  const fetched = job.jpeg!.streams?.[k];
  if (fetched) scratch.set(fetched, head);
  else if (readSync(fileOf(job.path), scratch, head, length, offset) !== length)
    throw new Error('the file ends before its JPEG stream does (a file cut short)');
  if (scratch[head] !== 0xff || scratch[head + 1] !== 0xd8) throw new Error('not a JPEG stream');
  if (tables) scratch.set(tables.subarray(0, tables.length - 2), 0);
  return scratch.subarray(0, head + length);
}

/** Decodes a band into `into` (bandBytes(job) bytes): JPEG tiles by libturbojpeg, each straight
 *  into place, when it is installed and each stream holds what the TIFF says it does; else
 *  libvips' TIFF reader (a remote slide's fetched streams, and a band holding a tile never
 *  written: libvips' JPEG reader, stream by stream). */
export async function decodeBand(job: BandJob, into: Uint8Array): Promise<void> {
  const stride = job.tiles * job.tileWidth * 3;
  const tx0 = Math.floor(job.left / job.tileWidth);
  const ty = Math.floor(job.top / job.tileHeight);
  // libvips refuses a band holding a tile never written: such a band is decoded stream by stream.
  let sparse = false;
  for (let k = 0; job.jpeg && k < job.tiles; k++)
    if (unwritten(job, k)) {
      paintBackground(job, into, k);
      sparse = true;
    }
  if (job.jpeg && hasTurboJpeg()) {
    const expected = job.jpeg.colorspace === 'ycbcr' ? JPEG_YCBCR : JPEG_RGB;
    let k = 0;
    for (; k < job.tiles; k++) {
      if (unwritten(job, k)) continue;
      try {
        const stream = readStream(job, k);
        // libvips takes the colour space from the TIFF's tags, libjpeg from the stream's markers:
        // where they differ, libvips decodes the band, as it did before.
        if (jpegHeader(stream).colorspace !== expected) break;
        decodeJpegInto(stream, into.subarray(k * job.tileWidth * 3), job.tileWidth, job.tileHeight, stride);
      } catch (err) {
        throw new Error(`TIFF tile column ${tx0 + k}, row ${ty} (directory ${job.page}): ${(err as Error).message}`);
      }
    }
    if (k === job.tiles) return;
    if (job.jpeg.streams || sparse)
      throw new Error(
        `tile ${k} of the band: its JPEG stream's colour space is not the ${job.jpeg.colorspace.toUpperCase()} the TIFF's photometric tag says; only libvips' TIFF reader reconciles them, and ${job.jpeg.streams ? 'it reads local files: copy the slide here' : 'it refuses this band, which holds a tile never written (TileByteCounts 0)'}`,
      );
  }
  let data: Buffer;
  try {
    if (job.jpeg?.streams || sparse) {
      for (let k = 0; k < job.tiles; k++) {
        if (unwritten(job, k)) continue;
        // A copy: while libvips decodes, another band of this thread's may take the scratch buffer.
        const tile = await sharp(Buffer.from(readStream(job, k)))
          .removeAlpha()
          .raw()
          .toBuffer({ resolveWithObject: true });
        if (tile.info.width !== job.tileWidth || tile.info.height !== job.tileHeight)
          throw new Error(
            `tile ${k} of the band: JPEG of ${tile.info.width}x${tile.info.height}, expected ${job.tileWidth}x${job.tileHeight}`,
          );
        for (let y = 0; y < job.tileHeight; y++)
          tile.data.copy(into, y * stride + k * job.tileWidth * 3, y * job.tileWidth * 3, (y + 1) * job.tileWidth * 3);
      }
      return;
    }
    data = await sharp(job.path, {
      page: job.page,
      limitInputPixels: false,
      ...(job.subifd >= 0 && { tiff: { subifd: job.subifd } }),
    })
      .extract({ left: job.left, top: job.top, width: job.width, height: job.height })
      .removeAlpha()
      .raw()
      .toBuffer();
  } catch (err) {
    throw new Error(
      `TIFF tiles columns ${tx0} to ${tx0 + job.tiles - 1}, row ${ty} (directory ${job.page}): ${(err as Error).message}`,
    );
  }
  const row = job.width * 3;
  for (let y = 0; y < job.height; y++) data.copy(into, y * stride, y * row, (y + 1) * row);
}

/** Rows [y0, y0 + n) of the w x h region at (x, y) of a level, cut from the decoded bands that
 *  cover it, into `out` at `at` (w * 3 bytes a row); white where no band does (past the level's
 *  edges). */
export function cutRows(
  r: Region,
  y0: number,
  n: number,
  bands: readonly BandView[],
  out: Uint8Array,
  at: number,
): void {
  const top = r.y + y0;
  const bottom = top + n;
  let covered = 0;
  for (const b of bands)
    covered +=
      Math.max(0, Math.min(r.x + r.w, b.left + b.width) - Math.max(r.x, b.left)) *
      Math.max(0, Math.min(bottom, b.top + b.height) - Math.max(top, b.top));
  if (covered < r.w * n) out.fill(255, at, at + r.w * n * 3);
  for (const b of bands) {
    const left = Math.max(r.x, b.left);
    const right = Math.min(r.x + r.w, b.left + b.width);
    if (right <= left) continue;
    const data = new Uint8Array(b.data);
    for (let row = Math.max(top, b.top); row < Math.min(bottom, b.top + b.height); row++) {
      const src = (row - b.top) * b.stride + (left - b.left) * 3;
      out.set(data.subarray(src, src + (right - left) * 3), at + ((row - top) * r.w + (left - r.x)) * 3);
    }
  }
}
