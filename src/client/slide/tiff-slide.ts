// Pyramidal TIFF, Aperio SVS and OME-TIFF with no system library: geotiff.js parses the IFDs and
// tags (the pyramid, MPP, compression, where each tile's bytes lie). Tiles are decoded in bands of
// several TIFF tiles of one tile row (bands.ts, on the reader pool): JPEG tiles by libturbojpeg
// when it is installed, anything else by libvips' own TIFF reader in sharp, which also streams a
// local level's overview. A level with tiles never written (TileByteCounts 0), which libvips
// refuses, is decoded here, overview and regions too, those tiles background: as OpenSlide draws
// them at an SVS's level 0 (at its lower levels they are drawn from the level above, as OpenSlide
// does: redrawBand). A remote slide (a ByteSource: HTTP, S3) is read the same way, but its tiles'
// bytes are fetched here and carried to the threads with the band (JPEG tiles to libturbojpeg,
// Aperio's JPEG 2000 to OpenJPEG, others to geotiff.js' decoders in frames.ts). A local JPEG 2000
// SVS is OpenSlide's (open.ts) where libopenslide0 is installed, else read here as a remote one
// is, its tiles' bytes read from the file by the decoding thread. Levels decoded here give their
// overview from the whole level (up to 2^28 px, four tile rows of bands at a time, tiled-read.ts).
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { fromFile, GeoTIFF, type GeoTIFFImage } from 'geotiff';
import sharp from 'sharp';
import { JPEG } from './bands.js';
import { isOmeXml, listedLevels, omeMpp, reducedLevels, subImages } from './ome-tiff.js';
import { openSlideLibrary } from './openslide-slide.js';
import type { ByteSource } from './remote/source.js';
import {
  checkedMpp,
  SlideError,
  type BandDecoder,
  type BandJob,
  type BandSource,
  type FrameBytes,
  type FrameCoding,
  type Slide,
  type SlideLevel,
  type TiffCoding,
} from './slide.js';
import { readTiled, tiledOverview } from './tiled-read.js';

const RGB = 2;
const YCBCR = 6;
/** Compressions read here (by libtiff): none, LZW, JPEG, deflate (two codes), PackBits. */
const DECODED = new Set([1, 5, JPEG, 8, 32946, 32773]);
/** Larger TIFF tiles than any scanner writes (they use 240 to 1024): refused before a band of
 *  them is allocated. */
const MAX_TILE_SIDE = 4096;

/** Compressions a remote slide's non-JPEG tiles are decoded from (geotiff.js' decoders). */
const REMOTE_DECODED = new Set([1, 5, 8, 32946, 32773]);

/** Aperio's JPEG 2000 tiles (the codes OpenSlide reads), decoded here by OpenJPEG: codestreams
 *  of Y, Cb, Cr (33003) or of R, G, B (33005). */
const APERIO_J2K = new Map<number, FrameCoding>([
  [33003, 'j2k-ycbcr'],
  [33005, 'j2k'],
]);

/** How a level's non-JPEG tiles are coded, or why they cannot be decoded from their bytes alone. */
async function tiffCoding(image: GeoTIFFImage, compression: number): Promise<TiffCoding | string> {
  const dir = image.fileDirectory;
  const value = async (tag: 'PlanarConfiguration' | 'Predictor', otherwise: number) =>
    dir.hasTag(tag) ? Number(await dir.loadValue(tag)) : otherwise;
  const samples = image.getSamplesPerPixel();
  const planar = await value('PlanarConfiguration', 1);
  const predictor = await value('Predictor', 1);
  if (!REMOTE_DECODED.has(compression)) return `TIFF compression ${compression}`;
  if (planar !== 1) return `planar configuration ${planar} (one plane per colour)`;
  if (predictor !== 1 && predictor !== 2) return `predictor ${predictor}`;
  return { compression, predictor, samples };
}

/** Aperio writes `|MPP = 0.2520|` into level 0's ImageDescription. */
export function aperioMpp(description: string | undefined): number | null {
  const match = /\|\s*MPP\s*=\s*([0-9.]+)/.exec(description ?? '');
  return match ? Number(match[1]) : null;
}

function rational(value: unknown): number | null {
  if (typeof value === 'number') return value;
  if ((Array.isArray(value) || ArrayBuffer.isView(value)) && (value as ArrayLike<number>).length >= 2) {
    const [num, den] = value as ArrayLike<number> & number[];
    return Number(num) / Number(den);
  }
  return null;
}

/** MPP from XResolution and ResolutionUnit (2 inch, 3 centimetre); none for unit 1 (no unit). */
async function resolutionMpp(image: GeoTIFFImage): Promise<{ mpp: number; source: string } | null> {
  const dir = image.fileDirectory;
  const unit = dir.hasTag('ResolutionUnit') ? Number(await dir.loadValue('ResolutionUnit')) : 2;
  const xres = dir.hasTag('XResolution') ? rational(await dir.loadValue('XResolution')) : null;
  if (!xres || xres <= 0 || (unit !== 2 && unit !== 3)) return null;
  const source = `XResolution ${Number(xres.toPrecision(6))} pixels per ${unit === 3 ? 'centimetre' : 'inch'} (ResolutionUnit ${unit})`;
  return { mpp: (unit === 3 ? 10000 : 25400) / xres, source };
}

/** More directories than any slide has (an OME-TIFF of many planes has thousands): a longer
 *  chain is refused, not followed. */
const MAX_DIRECTORIES = 100_000;

/** `length` bytes at `offset` of the file (fewer where it ends). */
type ReadAt = (offset: number, length: number) => Promise<Uint8Array>;

/** Bytes a value of each TIFF field type takes (TIFF 6.0, BigTIFF's 16 to 18); a type not
 *  listed is taken as 1 byte. */
const TYPE_BYTES: Record<number, number> = {
  3: 2,
  4: 4,
  5: 8,
  8: 2,
  9: 4,
  10: 8,
  11: 4,
  12: 8,
  13: 4,
  16: 8,
  17: 8,
  18: 8,
};

/** A tile count's check (TileOffsets, TileByteCounts): one a tile, up to one a tile and sample
 *  (PlanarConfiguration 2), else what is wrong, naming the tag and what was expected. */
function tileCountProblem(
  code: 324 | 325,
  count: number,
  grid: { across: number; down: number; width: number; height: number; samples: number },
): string | null {
  const tiles = grid.across * grid.down;
  if (count >= tiles && count <= tiles * grid.samples) return null;
  return `${code === 324 ? 'TileOffsets' : 'TileByteCounts'} (tag ${code}) lists ${count} values, expected one a tile: ${tiles} (${grid.across}x${grid.down} tiles of ${grid.width}x${grid.height})`;
}

/** A directory's tile count that is not one a tile, as the error it is (`where`: the directory). */
const badTileCount = (path: string, where: string, problem: string) =>
  new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${path}: ${where}: ${problem}`);

/** A directory whose tile counts are wrong, though within the file: an error if it is a pyramid
 *  level, else (a label, macro or thumbnail) skipped with a warning (TiffSlide.open). */
interface BadDirectory {
  page: number;
  subifd: number;
  where: string;
  problem: string;
}

/** Walks the chain of directories by their header and next-directory offsets before geotiff,
 *  which follows a chain that loops without end (its image count never returns, memory grows):
 *  a loop, or a chain past MAX_DIRECTORIES, is an error. Each directory's tag counts are checked
 *  on the way, before geotiff parses it (it allocates an array of each tag's count there: a
 *  BigTIFF's LONG8 count of 2^33 failed with its bare 'Invalid array length'): TileOffsets and
 *  TileByteCounts must be one a tile (as ranges() checks a level's), and no tag may hold more
 *  bytes than the file has. A tile count that is wrong but within the file is not an error here
 *  (geotiff parses it whole): it is returned in `bad`, for TiffSlide.open to fail a pyramid level
 *  with, and to skip a label or macro image with a warning. So are directory 0's SubIFDs in an
 *  OME-TIFF (its reduced levels, which subImages parses; no other TIFF's SubIFDs, nor another
 *  directory's, are read), each once, at most MAX_REDUCED_LEVELS of them (reducedLevels).
 *  Returns where the file ends too soon (`cut`: a directory past its end: a reader would stop
 *  there silently, with levels missing), or null. */
async function walkDirectories(
  path: string,
  size: number,
  read: ReadAt,
): Promise<{ cut: string | null; bad: BadDirectory[] }> {
  const bad: BadDirectory[] = [];
  const walked = (cut: string | null) => ({ cut, bad });
  const head = Buffer.from(await read(0, 16));
  const order = head.toString('latin1', 0, 2);
  if (head.length < 16 || (order !== 'II' && order !== 'MM')) return walked(null);
  const le = order === 'II';
  const big = (le ? head.readUInt16LE(2) : head.readUInt16BE(2)) === 43;
  const u = (b: Buffer, at: number, bytes: number) =>
    bytes === 8
      ? Number(le ? b.readBigUInt64LE(at) : b.readBigUInt64BE(at))
      : bytes === 4
        ? le
          ? b.readUInt32LE(at)
          : b.readUInt32BE(at)
        : le
          ? b.readUInt16LE(at)
          : b.readUInt16BE(at);
  const [countBytes, entryBytes, pointer] = big ? [8, 20, 8] : [2, 12, 4];
  const bytes = async (at: number, length: number) => Buffer.from(await read(at, length));
  /** The directory at `at` (`page`, `subifd` and `where`, for messages), its tags checked: its
   *  tags, and its next-directory offset; or where the file ends too soon. */
  const directory = async (at: number, page: number, subifd: number) => {
    const where = `directory ${page}${subifd >= 0 ? `, SubIFD ${subifd}` : ''}`;
    if (at + countBytes > size) return `${where} starts at byte ${at}`;
    const entries = u(await bytes(at, countBytes), 0, countBytes);
    const end = at + countBytes + entries * entryBytes + pointer;
    if (end > size) return `${where} ends at byte ${end}`;
    const dir = await bytes(at + countBytes, end - at - countBytes);
    const tags = tagsOf(dir, entries, big, u);
    const problem = checkCounts(path, where, size, tags);
    if (problem) bad.push({ page, subifd, where, problem });
    return { tags, next: u(dir, end - at - countBytes - pointer, pointer) };
  };
  /** Each directory's offset, and its place in the chain. */
  const seen = new Map<number, number>();
  let subIfds: Tag | undefined;
  let firstTags: Map<number, Tag> | undefined;
  let at = u(head, big ? 8 : 4, pointer);
  for (let k = 0; at !== 0; k++) {
    if (k === MAX_DIRECTORIES)
      throw new SlideError(
        'TILE_ERR_SLIDE_UNREADABLE',
        `${path}: the TIFF's chain of directories goes on past ${MAX_DIRECTORIES} (directory ${k} at byte ${at}); expected it to end (a next-directory offset of 0) well before`,
      );
    seen.set(at, k);
    const dir = await directory(at, k, -1);
    if (typeof dir === 'string') return walked(dir);
    if (k === 0) [firstTags, subIfds] = [dir.tags, dir.tags.get(330)];
    at = dir.next;
    const back = seen.get(at);
    if (back !== undefined)
      throw new SlideError(
        'TILE_ERR_SLIDE_UNREADABLE',
        `${path}: directory ${k} points back to directory ${back} (its next-directory offset is ${at}): the TIFF's chain of directories loops; expected each to lead to a new directory or end with 0`,
      );
  }
  /** A tag's values (`width` bytes each): in its entry where they fit, else at its offset. */
  const values = (tag: Tag, width: number, count = tag.count) =>
    tag.count * width <= pointer
      ? tag.inline.subarray(0, count * width)
      : bytes(u(tag.inline, 0, pointer), count * width);
  // Only an OME-TIFF's SubIFDs are read (subImages): another TIFF's are never parsed, so not
  // checked, as before this walk knew of them. OME-XML's root element follows its declaration:
  // the first MiB of the description shows it (read only where there are SubIFDs).
  const description = firstTags?.get(270);
  if (!subIfds || !description) return walked(null);
  const start = await values(description, 1, Math.min(description.count, 1 << 20));
  if (!isOmeXml(start.toString('latin1'))) return walked(null);
  // Refused before the list is read: a count of 2^28 in a sparse file was 1 GB read and 2.4 GB held.
  listedLevels(subIfds.count, path);
  // LONG or IFD offsets, or BigTIFF's LONG8 or IFD8.
  const wide = subIfds.type === 16 || subIfds.type === 18 ? 8 : 4;
  const listed = await values(subIfds, wide);
  if (listed.length < subIfds.count * wide) return walked(`directory 0's SubIFDs (tag 330) run past it`);
  const offsets = reducedLevels(
    Array.from({ length: subIfds.count }, (_, i) => u(listed, i * wide, wide)),
    path,
  );
  for (const [j, offset] of offsets.entries()) {
    // A SubIFD that is a directory of the chain was checked there; its own chain is not read.
    if (seen.has(offset)) continue;
    const dir = await directory(offset, 0, j);
    if (typeof dir === 'string') return walked(dir);
  }
  return walked(null);
}

/** A directory entry: its type, count, its value where it is one SHORT, LONG or LONG8, and its
 *  value field's bytes (the values where they fit, else their offset). */
interface Tag {
  type: number;
  count: number;
  value: number | null;
  inline: Buffer;
}

/** The tags of a directory's `entries` (`dir`, its entries from the first), by code. */
function tagsOf(
  dir: Buffer,
  entries: number,
  big: boolean,
  u: (b: Buffer, at: number, bytes: number) => number,
): Map<number, Tag> {
  const [entryBytes, countAt, countBytes] = big ? [20, 4, 8] : [12, 4, 4];
  const valueAt = countAt + countBytes;
  const tags = new Map<number, Tag>();
  for (let i = 0; i < entries; i++) {
    const e = i * entryBytes;
    const type = u(dir, e + 2, 2);
    const count = u(dir, e + countAt, countBytes);
    const one = { 3: 2, 4: 4, 16: 8 }[type];
    tags.set(u(dir, e, 2), {
      type,
      count,
      value: count === 1 && one ? u(dir, e + valueAt, one) : null,
      inline: dir.subarray(e + valueAt, e + entryBytes),
    });
  }
  return tags;
}

/** A directory's tag counts (`where`, for messages) against its tile grid and the file's `size`
 *  (walkDirectories): a tag past the file is an error (a wrong tile count so, by its own
 *  message); a wrong tile count within it is returned. */
function checkCounts(path: string, where: string, size: number, tags: Map<number, Tag>): string | null {
  const value = (tag: number) => tags.get(tag)?.value ?? null;
  const [width, length, tileWidth, tileLength] = [256, 257, 322, 323].map(value);
  let wrong: string | null = null;
  for (const code of [324, 325] as const) {
    const tag = tags.get(code);
    const problem =
      tag && width && length && tileWidth && tileLength
        ? tileCountProblem(code, tag.count, {
            across: Math.ceil(width / tileWidth),
            down: Math.ceil(length / tileLength),
            width: tileWidth,
            height: tileLength,
            samples: value(277) ?? 1,
          })
        : null;
    if (problem && tag!.count * (TYPE_BYTES[tag!.type] ?? 1) > size) throw badTileCount(path, where, problem);
    wrong ??= problem;
  }
  for (const [code, { type, count }] of tags) {
    const bytes = count * (TYPE_BYTES[type] ?? 1);
    if (bytes > size)
      throw new SlideError(
        'TILE_ERR_SLIDE_UNREADABLE',
        `${path}: ${where}: tag ${code} (type ${type}) lists ${count} values, ${bytes} bytes, more than the file's ${size}; expected its values to lie in the file`,
      );
  }
  return wrong;
}

/** ReadAt of a local file. */
async function readLocal<T>(path: string, use: (read: ReadAt) => Promise<T>): Promise<T> {
  const fd = openSync(path, 'r');
  try {
    return await use(async (offset, length) => {
      const buf = Buffer.alloc(length);
      return buf.subarray(0, readSync(fd, buf, 0, length, offset));
    });
  } finally {
    closeSync(fd);
  }
}

const truncated = (path: string, size: number, where: string) =>
  new SlideError(
    'TILE_ERR_SLIDE_TRUNCATED',
    `${path}: the file is cut short: it is ${size} bytes, and ${where}; copy it again`,
  );

interface Level extends SlideLevel {
  /** The level's directory in the file (libvips' `page`), and its SubIFD there (OME-TIFF's
   *  reduced levels; -1 for the directory itself). */
  page: number;
  subifd: number;
  tileWidth: number;
  tileHeight: number;
  /** Tile columns and rows (edge tiles included). */
  tilesAcross: number;
  tilesDown: number;
  compression: number;
  /** JPEG tiles libturbojpeg may decode: photometric YCbCr or RGB, which the streams' own
   *  markers are checked against as they are decoded. */
  photometric: number;
  jpegTables: Uint8Array | null;
  /** How tiles other than JPEG are coded where they are decoded here (a remote slide's, as
   *  libvips reads files only, and a sparse local level's); null for JPEG tiles and otherwise. */
  tiff: TiffCoding | null;
  /** Some tile was never written (TileByteCounts 0), which libvips refuses any region touching,
   *  or is drawn from the level above (missing). */
  sparse: boolean;
  /** An SVS's tiles drawn from the level above (redrawBand): those never written and, as
   *  OpenSlide marks them, those over a missing tile of the level above. */
  missing: Set<number>;
  /** How the level's JPEG 2000 tiles (Aperio's) are coded; null for other tiles. */
  j2k: FrameCoding | null;
  image: GeoTIFFImage;
  /** Where each tile's bytes lie, loaded on first use. */
  ranges?: Promise<{ offsets: ArrayLike<number | bigint>; counts: ArrayLike<number | bigint> }>;
}

/** A level's directory, and its SubIFD where it is one. */
const where = (l: Level) => `directory ${l.page}${l.subifd >= 0 ? `, SubIFD ${l.subifd}` : ''}`;

/** OpenSlide's rule for an SVS: a tile over a missing tile of the level above is missing too
 *  ("tiles concatenating a missing tile are sometimes corrupt"), two levels' tile grids related by
 *  the rounded ratio of their tile counts. */
function carryMissing(pyramid: Level[]): void {
  for (let i = 0; i + 1 < pyramid.length; i++) {
    const [l, next] = [pyramid[i], pyramid[i + 1]];
    const across = Math.max(1, Math.round(l.tilesAcross / next.tilesAcross));
    const down = Math.max(1, Math.round(l.tilesDown / next.tilesDown));
    for (const t of l.missing) {
      const tx = Math.min(next.tilesAcross - 1, Math.floor((t % l.tilesAcross) / across));
      const ty = Math.min(next.tilesDown - 1, Math.floor(Math.floor(t / l.tilesAcross) / down));
      next.missing.add(ty * next.tilesAcross + tx);
      next.sparse = true;
    }
  }
}

/** A local JPEG 2000 TIFF left to OpenSlide (TiffSlide.open's `builtInJ2k`). */
export class OpenSlideFirst extends SlideError {
  constructor(message: string) {
    super('TILE_ERR_SLIDE_FORMAT', message);
  }
}

export class TiffSlide implements Slide {
  readonly reader = 'tiff' as const;

  /** Bytes of the tiles fetched for decoding (remote slides). */
  tileBytes = 0;

  private constructor(
    readonly path: string,
    private readonly tiff: GeoTIFF,
    private readonly pyramid: Level[],
    readonly mpp: number | null,
    readonly mppError: string | null,
    /** Where a remote slide's bytes come from; null for a local file. */
    readonly source: ByteSource | null,
    /** An Aperio SVS (its ImageDescription says so, as OpenSlide tells one). */
    private readonly aperio: boolean,
    readonly warnings: readonly string[],
  ) {}

  get levels(): SlideLevel[] {
    return this.pyramid.map(({ width, height, downsample }) => ({ width, height, downsample }));
  }

  /** `builtInJ2k`: decode Aperio's JPEG 2000 tiles here; by default a remote slide's, and a local
   *  one's where libopenslide0 is missing (else OpenSlideFirst is thrown: open.ts asks OpenSlide,
   *  whose native libopenjp2 is the reference and ~100x faster than OpenJPEG's WebAssembly
   *  build, and comes back here only if OpenSlide does not take the file). */
  static async open(
    path: string,
    source: ByteSource | null = null,
    { builtInJ2k }: { builtInJ2k?: boolean } = {},
  ): Promise<TiffSlide> {
    const size = source ? source.size : statSync(path).size;
    const { cut, bad } = source
      ? await walkDirectories(path, size, (offset, length) => source.read(offset, length))
      : await readLocal(path, (read) => walkDirectories(path, size, read));
    if (cut) throw truncated(path, size, cut);
    let tiff: GeoTIFF;
    /** Each image with its directory and SubIFD. */
    let images: { image: GeoTIFFImage; page: number; subifd: number }[];
    let description: string | undefined;
    try {
      tiff = source ? await GeoTIFF.fromSource(geotiffSource(source)) : await fromFile(path);
      const count = await tiff.getImageCount();
      const main = await Promise.all(Array.from({ length: count }, (_, i) => tiff.getImage(i)));
      images = main.map((image, page) => ({ image, page, subifd: -1 }));
      const first = main[0].fileDirectory;
      description = first.hasTag('ImageDescription') ? String(await first.loadValue('ImageDescription')) : undefined;
      // OME-TIFF: the first image's pyramid is its SubIFDs; the other directories are its other
      // planes and series (label, macro).
      const reduced = isOmeXml(description) ? await subImages(tiff, main[0], path) : [];
      if (reduced.length) images = [images[0], ...reduced.map((image, subifd) => ({ image, page: 0, subifd }))];
    } catch (err) {
      if (err instanceof SlideError) throw err;
      throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: not a readable TIFF (${(err as Error).message})`);
    }
    // Pyramid levels are the tiled RGB images with level 0's aspect ratio; SVS thumbnails, labels
    // and macro images are stripped and are left out.
    const tiled = images.filter(({ image: im }) => im.isTiled && im.getSamplesPerPixel() >= 3);
    if (!tiled.length)
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${path}: no tiled RGB image in this TIFF (a flat image is not a slide pyramid)`,
      );
    const base = tiled[0].image;
    const aspect = base.getWidth() / base.getHeight();
    const pyramid: Level[] = [];
    for (const { image, page, subifd } of tiled) {
      if (Math.abs(image.getWidth() / image.getHeight() - aspect) > 0.02 * aspect && image !== base) continue;
      const dir = image.fileDirectory;
      const photometric = Number(await dir.loadValue('PhotometricInterpretation'));
      const compression = Number(dir.hasTag('Compression') ? await dir.loadValue('Compression') : 1);
      const j2k = APERIO_J2K.get(compression) ?? null;
      // libopenslide is loaded only for a file with such tiles.
      if (j2k && !(builtInJ2k ?? (!!source || !openSlideLibrary())))
        throw new OpenSlideFirst(`${path}: directory ${page}: JPEG 2000 tiles, OpenSlide's to read`);
      const tiff = source && compression !== JPEG && !j2k ? await tiffCoding(image, compression) : null;
      if (typeof tiff === 'string')
        throw new SlideError(
          'TILE_ERR_SLIDE_FORMAT',
          `${path}: directory ${page}: ${tiff}; remote slides are read with JPEG or Aperio's JPEG 2000 (33003, 33005) tiles, or 8-bit RGB tiles uncompressed, LZW, deflate or PackBits; copy this one here to read it`,
        );
      if (!DECODED.has(compression) && !j2k)
        throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: TIFF compression ${compression} needs libopenslide0`);
      if (photometric !== RGB && !(photometric === YCBCR && compression === JPEG)) {
        throw new SlideError(
          'TILE_ERR_SLIDE_FORMAT',
          `${path}: photometric interpretation ${photometric} is not RGB; install libopenslide0 to read it through OpenSlide`,
        );
      }
      if (image.getBitsPerSample() !== 8)
        throw new SlideError(
          'TILE_ERR_SLIDE_FORMAT',
          `${path}: ${image.getBitsPerSample()} bits per sample, expected 8`,
        );
      const tileWidth = image.getTileWidth();
      const tileHeight = image.getTileHeight();
      if (!(tileWidth >= 16 && tileHeight >= 16 && tileWidth <= MAX_TILE_SIDE && tileHeight <= MAX_TILE_SIDE))
        throw new SlideError(
          'TILE_ERR_SLIDE_FORMAT',
          `${path}: TIFF tiles of ${tileWidth}x${tileHeight} (expected 16 to ${MAX_TILE_SIDE} on a side)`,
        );
      pyramid.push({
        page,
        subifd,
        image,
        width: image.getWidth(),
        height: image.getHeight(),
        downsample: (base.getWidth() / image.getWidth() + base.getHeight() / image.getHeight()) / 2,
        tileWidth,
        tileHeight,
        tilesAcross: Math.ceil(image.getWidth() / tileWidth),
        tilesDown: Math.ceil(image.getHeight() / tileHeight),
        compression,
        photometric,
        tiff: typeof tiff === 'string' ? null : tiff,
        j2k,
        sparse: false,
        missing: new Set(),
        jpegTables:
          compression === JPEG && dir.hasTag('JPEGTables')
            ? Uint8Array.from((await dir.loadValue('JPEGTables')) as ArrayLike<number>)
            : null,
      });
    }
    pyramid.sort((a, b) => a.downsample - b.downsample);
    // A directory with wrong tile counts fails the slide if it is a level; a label, macro or
    // thumbnail is not tiled for inference, so it is skipped, said in the slide's summary row.
    const warnings: string[] = [];
    for (const b of bad) {
      if (pyramid.some((l) => l.page === b.page && l.subifd === b.subifd)) throw badTileCount(path, b.where, b.problem);
      const image = images.find((i) => i.page === b.page && i.subifd === b.subifd)?.image;
      const text = image?.fileDirectory.hasTag('ImageDescription')
        ? String(await image.fileDirectory.loadValue('ImageDescription'))
            .replace(/[\0\s]+/g, ' ')
            .trim()
        : '';
      const named = text && text.length <= 80 ? ` (ImageDescription: ${text})` : '';
      warnings.push(
        `warning: ${b.where}${named}, not a pyramid level (a label, macro or thumbnail image), was skipped: ${b.problem}`,
      );
    }
    if (base !== images[0].image)
      description = base.fileDirectory.hasTag('ImageDescription')
        ? String(await base.fileDirectory.loadValue('ImageDescription'))
        : undefined;
    const ome = isOmeXml(description) ? omeMpp(description!, path) : null;
    const aperio = aperioMpp(description);
    const found =
      aperio !== null ? { mpp: aperio, source: `the ImageDescription's MPP = ${aperio}` } : await resolutionMpp(base);
    const mpp = ome ?? (found ? checkedMpp(found.mpp, found.source, path) : { mpp: null, error: null });
    const svs = !!description?.startsWith('Aperio');
    const slide = new TiffSlide(path, tiff, pyramid, mpp.mpp, mpp.error, source, svs, warnings);
    // Every level's tiles in the file: a copy cut short is said so, not found tile by tile.
    for (const l of pyramid) {
      const { offsets, counts } = await slide.ranges(l);
      let end = 0;
      for (let i = 0; i < offsets.length; i++) {
        end = Math.max(end, Number(offsets[i]) + Number(counts[i]));
        if (Number(counts[i]) === 0) l.missing.add(i);
      }
      l.sparse = l.missing.size > 0;
      if (end > size)
        throw truncated(path, size, `level ${pyramid.indexOf(l)}'s tiles (directory ${l.page}) run to byte ${end}`);
    }
    if (svs) carryMissing(pyramid);
    for (const l of pyramid) {
      // A sparse local level's tiles other than JPEG are decoded as a remote slide's are.
      if (l.sparse && !l.tiff && !l.j2k && l.compression !== JPEG) {
        const coding = await tiffCoding(l.image, l.compression);
        if (typeof coding === 'string')
          throw new SlideError(
            'TILE_ERR_SLIDE_FORMAT',
            `${path}: directory ${l.page} has tiles never written (TileByteCounts 0), which libvips refuses, and ${coding}, which only libvips decodes`,
          );
        l.tiff = coding;
      }
    }
    return slide;
  }

  bandSource(level: number): BandSource {
    const l = this.pyramid[level];
    return {
      width: l.width,
      height: l.height,
      tileWidth: l.tileWidth,
      tileHeight: l.tileHeight,
      tilesAcross: l.tilesAcross,
      tilesDown: l.tilesDown,
    };
  }

  /** How to decode tiles [tx0, tx1) of tile row `ty`: the region for libvips, and for JPEG
   *  tiles the streams' byte ranges for libturbojpeg. */
  async bandJob(level: number, ty: number, tx0: number, tx1: number): Promise<BandJob> {
    const l = this.pyramid[level];
    const region = {
      left: tx0 * l.tileWidth,
      top: ty * l.tileHeight,
      width: Math.min(tx1 * l.tileWidth, l.width) - tx0 * l.tileWidth,
      height: Math.min(l.tileHeight, l.height - ty * l.tileHeight),
    };
    const job: BandJob = {
      path: this.path,
      page: l.page,
      subifd: l.subifd,
      tileWidth: l.tileWidth,
      tileHeight: l.tileHeight,
      tiles: tx1 - tx0,
      ...region,
    };
    // A local level's other tiles, all written, are libvips' to read.
    if (l.compression !== JPEG && !this.decodedHere(l)) return job;
    const dir = await this.ranges(l);
    const ranges: number[] = [];
    for (let tx = tx0; tx < tx1; tx++) {
      const i = ty * l.tilesAcross + tx;
      ranges.push(Number(dir.offsets[i]), Number(dir.counts[i]));
    }
    const fetched = this.source ? await this.fetchTiles(ranges) : undefined;
    // A tile of 0 bytes was never written (TileByteCounts 0): background (bands.ts).
    const tiles = () =>
      Array.from({ length: job.tiles }, (_, k): FrameBytes | null => {
        const [offset, length] = [ranges[2 * k], ranges[2 * k + 1]];
        if (length === 0) return null;
        return fetched ? { bytes: fetched[k] } : { path: this.path, offset, length };
      });
    if (l.j2k) return { ...job, frames: { coding: l.j2k, tiles: tiles() } };
    if (l.tiff) return { ...job, frames: { coding: 'tiff', tiles: tiles(), tiff: l.tiff } };
    const jpeg: BandJob['jpeg'] = {
      tables: l.jpegTables,
      ranges,
      colorspace: l.photometric === YCBCR ? 'ycbcr' : 'rgb',
      ...(fetched && { streams: fetched }),
    };
    return { ...job, jpeg };
  }

  /** An SVS's missing tiles below level 0 (never written, or over a missing tile: carryMissing)
   *  are drawn from the level above, as OpenSlide draws them (at level 0 a tile never written is
   *  background): the tile's area of that level, itself redrawn where it has holes, shrunk to the
   *  tile. Not OpenSlide's pixels to the bit (it paints with
   *  cairo): on test/e2e/slide-sparse.test.ts's slide a cubic kernel came 0.22 / 0.38 from them
   *  on average (levels 1 / 2), Mitchell 0.23 / 0.47, Lanczos-3 0.24 / 0.62, linear 0.28 / 0.55,
   *  white 29 / 50; white hid the tissue from detection, which reads the low levels (before, that
   *  slide failed with TILE_ERR_SLIDE_NO_TISSUE). */
  async redrawBand(level: number, job: BandJob, data: SharedArrayBuffer): Promise<void> {
    const l = this.pyramid[level];
    if (!this.aperio || level === 0 || !l.missing.size) return;
    const [tx0, ty] = [job.left / l.tileWidth, job.top / l.tileHeight];
    const into = new Uint8Array(data);
    const row = l.tileWidth * 3;
    const stride = job.tiles * row;
    for (let k = 0; k < job.tiles; k++) {
      if (!l.missing.has(ty * l.tilesAcross + tx0 + k)) continue;
      const tile = await this.fromLevelAbove(level, tx0 + k, ty).catch((err: Error) => {
        // Said of the level that failed (its reader's message names the file, then the level or
        // directory), not of the level being drawn.
        const why = err.message.startsWith(`${this.path}: `) ? err.message.slice(this.path.length + 2) : err.message;
        throw new SlideError(
          'TILE_ERR_SLIDE_UNREADABLE',
          `${this.path}: level ${level}'s tile ${tx0 + k},${ty} is missing and could not be drawn from level ${level - 1}: ${why}`,
        );
      });
      for (let y = 0; y < l.tileHeight; y++) into.set(tile.subarray(y * row, (y + 1) * row), k * row + y * stride);
    }
  }

  /** Tile (tx, ty) of `level` as the level above draws its area, tileWidth x tileHeight RGB. */
  private async fromLevelAbove(level: number, tx: number, ty: number): Promise<Buffer> {
    const [l, above] = [this.pyramid[level], this.pyramid[level - 1]];
    const scale = l.downsample / above.downsample;
    const [x, y] = [Math.round(tx * l.tileWidth * scale), Math.round(ty * l.tileHeight * scale)];
    const [w, h] = [Math.round(l.tileWidth * scale), Math.round(l.tileHeight * scale)];
    const rgb = await this.readRegion(level - 1, x, y, w, h);
    return sharp(rgb, { raw: { width: w, height: h, channels: 3 } })
      .resize(l.tileWidth, l.tileHeight, { kernel: 'cubic', fit: 'fill' })
      .raw()
      .toBuffer();
  }

  /** A remote slide's tiles at `ranges` (offset, length pairs), fetched into shared memory, so
   *  that the thread decoding them reads them where they are instead of a copy serialised into
   *  its task. */
  private async fetchTiles(ranges: number[]): Promise<Uint8Array[]> {
    const wanted = Array.from({ length: ranges.length / 2 }, (_, k) => [ranges[2 * k], ranges[2 * k + 1]] as const);
    const fetched = await this.source!.readRanges(wanted);
    const total = wanted.reduce((n, [, length]) => n + length, 0);
    const shared = new Uint8Array(new SharedArrayBuffer(total));
    let at = 0;
    this.tileBytes += total;
    return fetched.map((tile) => {
      shared.set(tile, at);
      return shared.subarray(at, (at += tile.length));
    });
  }

  private ranges(l: Level) {
    l.ranges ??= (async () => {
      const dir = l.image.fileDirectory;
      // The counts the tags declare, checked before their values are loaded: a count of 2^30 is
      // a 4 GB read (geotiff's own error then names neither the tag nor the directory).
      for (const code of [324, 325] as const) {
        const problem = tileCountProblem(
          code,
          dir.deferredArrays.get(code)?.length ?? (dir.actualizedFields.get(code) as unknown[]).length,
          {
            across: l.tilesAcross,
            down: l.tilesDown,
            width: l.tileWidth,
            height: l.tileHeight,
            samples: l.image.getSamplesPerPixel(),
          },
        );
        if (problem) throw badTileCount(this.path, where(l), problem);
      }
      const offsets = (await dir.loadValue('TileOffsets')) as ArrayLike<number | bigint>;
      const counts = (await dir.loadValue('TileByteCounts')) as ArrayLike<number | bigint>;
      if (offsets.length < l.tilesAcross * l.tilesDown || counts.length !== offsets.length)
        throw new SlideError(
          'TILE_ERR_SLIDE_UNREADABLE',
          `${this.path}: ${where(l)} lists ${offsets.length} tiles, expected ${l.tilesAcross * l.tilesDown}`,
        );
      return { offsets, counts };
    })();
    return l.ranges;
  }

  /** libvips' reader of a level of a local file. */
  private vips(l: Level) {
    return sharp(this.path, {
      page: l.page,
      limitInputPixels: false,
      ...(l.subifd >= 0 && { tiff: { subifd: l.subifd } }),
    });
  }

  /** Whether a level's overview and regions are decoded here from its tiles, band by band, not
   *  by libvips' TIFF reader: a remote slide's and JPEG 2000 tiles (libvips reads neither), and a
   *  sparse level's (libvips refuses any region touching a tile never written; here it is
   *  background, bands.ts). */
  private decodedHere(l: Level): boolean {
    return !!this.source || !!l.j2k || l.sparse;
  }

  /** What is decoded here from the tiles (tiled-read.ts), its failure said with the file's name. */
  private async fromTiles<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      if (err instanceof SlideError) throw err;
      throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: ${(err as Error).message}`);
    }
  }

  async overview(level: number, width: number, height: number, decode?: BandDecoder): Promise<Buffer> {
    const l = this.pyramid[level];
    if (this.decodedHere(l)) return this.fromTiles(() => tiledOverview(this, this.path, level, width, height, decode));
    let image = this.vips(l);
    if (l.width !== width || l.height !== height)
      image = image.resize(width, height, { kernel: 'linear', fit: 'fill' });
    try {
      return await image.removeAlpha().raw().toBuffer();
    } catch (err) {
      throw new SlideError('TILE_ERR_SLIDE_UNREADABLE', `${this.path}: directory ${l.page}: ${(err as Error).message}`);
    }
  }

  async readRegion(level: number, x: number, y: number, w: number, h: number): Promise<Uint8Array> {
    const l = this.pyramid[level];
    if (this.decodedHere(l)) return this.fromTiles(() => readTiled(this, level, { x, y, w, h }));
    const out = Buffer.alloc(w * h * 3, 255);
    const left = Math.max(0, x);
    const top = Math.max(0, y);
    const right = Math.min(l.width, x + w);
    const bottom = Math.min(l.height, y + h);
    if (right <= left || bottom <= top) return out;
    let data: Buffer;
    try {
      data = await this.vips(l)
        .extract({ left, top, width: right - left, height: bottom - top })
        .removeAlpha()
        .raw()
        .toBuffer();
    } catch (err) {
      throw new SlideError(
        'TILE_ERR_SLIDE_UNREADABLE',
        `${this.path}: directory ${l.page}, ${right - left}x${bottom - top} at ${left},${top}: ${(err as Error).message}`,
      );
    }
    const row = (right - left) * 3;
    for (let r = top; r < bottom; r++)
      data.copy(out, ((r - y) * w + (left - x)) * 3, (r - top) * row, (r - top + 1) * row);
    return out;
  }

  async close(): Promise<void> {
    if (this.source) this.source.close();
    else this.tiff.close();
  }
}

/** geotiff's view of a ByteSource: its reads (headers, directories, tag values) come through
 *  the source's block cache. */
function geotiffSource(source: ByteSource): Parameters<typeof GeoTIFF.fromSource>[0] {
  return {
    fetch: (slices: { offset: number; length: number }[]) =>
      Promise.all(slices.map(async ({ offset, length }) => (await source.read(offset, length)).slice().buffer)),
    fileSize: source.size,
    close: async () => {},
  } as unknown as Parameters<typeof GeoTIFF.fromSource>[0];
}
