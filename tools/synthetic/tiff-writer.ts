// A small classic-TIFF writer for test slides: tiled JPEG pyramid levels (optionally with shared
// JPEGTables, as Aperio writes them) and stripped images (SVS thumbnail), little-endian.
// Test-only: real slides come from scanners; nothing at run time writes TIFF.
import { writeFileSync } from 'node:fs';
import sharp from 'sharp';

export interface TiffImage {
  width: number;
  height: number;
  /** Tiled: one JPEG per tile, row-major. Stripped: one JPEG per strip of `rowsPerStrip` rows. */
  blocks: Buffer[];
  tileSize?: number;
  rowsPerStrip?: number;
  jpegTables?: Buffer;
  description?: string;
  /** XResolution and YResolution in pixels per ResolutionUnit (2 inch, 3 centimetre). */
  resolution?: { perUnit: number; unit: 2 | 3 };
  /** JPEG chroma subsampling (YCbCrSubSampling): 1 for 4:4:4, 2 for 4:2:0. */
  subsampling?: 1 | 2;
  /** NewSubfileType: 0 for full-resolution and pyramid levels, 1 for reduced images (thumbnail). */
  subfileType?: number;
}

const SHORT = 3;
const LONG = 4;
const RATIONAL = 5;
const ASCII = 2;
const UNDEFINED = 7;
const TYPE_SIZE: Record<number, number> = { [SHORT]: 2, [LONG]: 4, [RATIONAL]: 8, [ASCII]: 1, [UNDEFINED]: 1 };

interface Entry {
  tag: number;
  type: number;
  values: number[] | Buffer;
}

function encodeValues(e: Entry): Buffer {
  if (Buffer.isBuffer(e.values)) return e.values;
  const size = TYPE_SIZE[e.type];
  const out = Buffer.alloc(e.values.length * size);
  e.values.forEach((v, i) => {
    if (e.type === SHORT) out.writeUInt16LE(v, i * 2);
    else if (e.type === LONG) out.writeUInt32LE(v, i * 4);
    else {
      out.writeUInt32LE(v, i * 8); // RATIONAL: v / 1
      out.writeUInt32LE(1, i * 8 + 4);
    }
  });
  return out;
}

/** Writes the images as consecutive IFDs (the first is level 0). */
export function writeTiff(path: string, images: TiffImage[]): void {
  const parts: Buffer[] = [Buffer.alloc(8)];
  let offset = 8;
  const push = (b: Buffer) => {
    const at = offset;
    parts.push(b);
    offset += b.length;
    if (offset % 2) {
      parts.push(Buffer.alloc(1));
      offset += 1;
    }
    return at;
  };
  const ifdOffsets: number[] = [];
  const nextPointers: number[] = [];
  for (const image of images) {
    const blockOffsets = image.blocks.map(push);
    const tiled = image.tileSize !== undefined;
    const entries: Entry[] = [
      { tag: 254, type: LONG, values: [image.subfileType ?? 0] },
      { tag: 256, type: LONG, values: [image.width] },
      { tag: 257, type: LONG, values: [image.height] },
      { tag: 258, type: SHORT, values: [8, 8, 8] },
      { tag: 259, type: SHORT, values: [7] },
      // The JPEG streams are YCbCr (4:4:4 or 4:2:0), which the TIFF says with photometric 6 and
      // YCbCrSubSampling; readers then convert to RGB.
      { tag: 262, type: SHORT, values: [6] },
      { tag: 277, type: SHORT, values: [3] },
      { tag: 284, type: SHORT, values: [1] },
    ];
    if (image.description !== undefined)
      entries.push({ tag: 270, type: ASCII, values: Buffer.from(image.description + '\0', 'latin1') });
    if (image.resolution !== undefined) {
      const value = Math.round(image.resolution.perUnit);
      entries.push(
        { tag: 282, type: RATIONAL, values: [value] },
        { tag: 283, type: RATIONAL, values: [value] },
        { tag: 296, type: SHORT, values: [image.resolution.unit] },
      );
    }
    if (tiled) {
      entries.push(
        { tag: 322, type: SHORT, values: [image.tileSize!] },
        { tag: 323, type: SHORT, values: [image.tileSize!] },
        { tag: 324, type: LONG, values: blockOffsets },
        { tag: 325, type: LONG, values: image.blocks.map((b) => b.length) },
      );
    } else {
      entries.push(
        { tag: 273, type: LONG, values: blockOffsets },
        { tag: 278, type: LONG, values: [image.rowsPerStrip ?? image.height] },
        { tag: 279, type: LONG, values: image.blocks.map((b) => b.length) },
      );
    }
    entries.push({ tag: 530, type: SHORT, values: [image.subsampling ?? 1, image.subsampling ?? 1] });
    if (image.jpegTables) entries.push({ tag: 347, type: UNDEFINED, values: image.jpegTables });
    entries.sort((a, b) => a.tag - b.tag);
    // Values longer than 4 bytes go before the IFD; shorter ones sit in the entry.
    const encoded = entries.map(encodeValues);
    const valueOffsets = encoded.map((b) => (b.length > 4 ? push(b) : -1));
    const ifd = Buffer.alloc(2 + entries.length * 12 + 4);
    ifd.writeUInt16LE(entries.length, 0);
    entries.forEach((e, i) => {
      const at = 2 + i * 12;
      ifd.writeUInt16LE(e.tag, at);
      ifd.writeUInt16LE(e.type, at + 2);
      ifd.writeUInt32LE(e.values.length, at + 4);
      if (valueOffsets[i] >= 0) ifd.writeUInt32LE(valueOffsets[i], at + 8);
      else encoded[i].copy(ifd, at + 8);
    });
    const ifdAt = push(ifd);
    ifdOffsets.push(ifdAt);
    nextPointers.push(ifdAt + ifd.length - 4);
  }
  const file = Buffer.concat(parts);
  file.write('II', 0, 'latin1');
  file.writeUInt16LE(42, 2);
  file.writeUInt32LE(ifdOffsets[0], 4);
  for (let i = 0; i + 1 < ifdOffsets.length; i++) file.writeUInt32LE(ifdOffsets[i + 1], nextPointers[i]);
  writeFileSync(path, file);
}

/** JPEG of an RGB block, with the standard Huffman tables so that tiles can share JPEGTables. */
export function encodeJpeg(
  rgb: Uint8Array,
  width: number,
  height: number,
  quality: number,
  chroma: '4:4:4' | '4:2:0' = '4:4:4',
): Promise<Buffer> {
  return sharp(rgb, { raw: { width, height, channels: 3 } })
    .jpeg({ quality, optimiseCoding: false, chromaSubsampling: chroma })
    .toBuffer();
}

/** Splits a JPEG into its tables (SOI, DQT, DHT, EOI) and the abbreviated stream without them,
 *  the way Aperio shares one JPEGTables tag across all tiles of a level. */
export function splitJpegTables(full: Buffer): { tables: Buffer; stream: Buffer } {
  const tables: Buffer[] = [full.subarray(0, 2)];
  const stream: Buffer[] = [full.subarray(0, 2)];
  let pos = 2;
  while (pos < full.length) {
    const marker = full.readUInt16BE(pos);
    if (marker === 0xffda) {
      stream.push(full.subarray(pos));
      break;
    }
    const end = pos + 2 + full.readUInt16BE(pos + 2);
    if (marker === 0xffdb || marker === 0xffc4) tables.push(full.subarray(pos, end));
    else if (marker !== 0xffe0) stream.push(full.subarray(pos, end));
    pos = end;
  }
  tables.push(Buffer.from([0xff, 0xd9]));
  return { tables: Buffer.concat(tables), stream: Buffer.concat(stream) };
}
