// DICOM Part 10 files: each instance's data set up to its pixel data, parsed by dicom-parser from
// the head of the file (never the pixel data), and where each frame's bytes lie, from the item
// headers of the encapsulated pixel data (or the frame size, uncompressed), so that the reader
// pool reads each frame's bytes straight from the file, as it does TIFF tiles.
import { closeSync, fstatSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import dicomParser from 'dicom-parser';
import { SlideError } from '../slide.js';
import { fileAttrs } from './attributes.js';
import { framesOf, seriesOf, type Instance } from './pyramid.js';

/** An instance as its head tells it: where its pixel data starts, and its length (null:
 *  encapsulated, undefined length). */
export interface DataSetHead extends Instance {
  pixelData: { offset: number; length: number | null } | null;
  /** The Extended Offset Table (7FE0,0001) and its lengths (7FE0,0002), when the instance has one:
   *  each frame's item from the first fragment's, and its length. */
  extendedOffsets?: { offsets: Float64Array; lengths: Float64Array };
}

export interface FileInstance extends DataSetHead {
  path: string;
  /** Byte offset and length of each frame in the file, filled in by locateFrames. */
  frames?: Float64Array;
}

const HEAD = 1 << 20;

/** Whether a file's first bytes are a DICOM Part 10 file's (128 bytes, then "DICM"). */
export const isDicomHead = (b: Uint8Array) =>
  b.length >= 132 && Buffer.from(b.buffer, b.byteOffset + 128, 4).toString('latin1') === 'DICM';

/** Whether the file starts as a DICOM Part 10 file does. */
export function isDicomFile(path: string): boolean {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const head = Buffer.alloc(132);
    return isDicomHead(head.subarray(0, readSync(fd, head, 0, 132, 0)));
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export const unreadable = (message: string) => new SlideError('TILE_ERR_SLIDE_UNREADABLE', message);

/** (7FE0,0001) Extended Offset Table as explicit VR little endian writes it: tag, "OV", 2 reserved
 *  bytes. dicom-parser 1.8 reads OV's length as 2 bytes (it predates the VR), so an instance with
 *  one is parsed up to it, and the two tables and the pixel data's header are read here. */
const EXTENDED_OFFSETS = Buffer.from([0xe0, 0x7f, 0x01, 0x00, 0x4f, 0x56, 0x00, 0x00]);

/** What dicom-parser throws (a string, or {exception, dataSet}) as a message. */
const parserMessage = (err: unknown) =>
  typeof err === 'string' ? err : ((err as { exception?: string }).exception ?? (err as Error).message ?? String(err));

/** The element of `tag` (explicit VR, 4-byte length) at `at` in `head`: its value's offset and
 *  length, or null when the head ends inside its header. */
function longElementAt(head: Buffer, at: number, tag: number): { offset: number; length: number } | null {
  if (at + 12 > head.length) return null;
  if (head.readUInt16LE(at) !== 0x7fe0 || head.readUInt16LE(at + 2) !== tag)
    throw new Error(`expected (7FE0,${tag.toString(16).padStart(4, '0').toUpperCase()}) at byte ${at}`);
  return { offset: at + 12, length: head.readUInt32LE(at + 8) };
}

/** An instance's data set from the first `head.length` bytes of its `size`: null when the head
 *  ends before the pixel data (read more); a file that ends there is unreadable. Local files
 *  (readInstance) and remote ones (remote-files.ts) read their heads this way. */
export function instanceFromHead(head: Uint8Array, size: number, where: string): DataSetHead | null {
  const bytes = Buffer.from(head.buffer, head.byteOffset, head.length);
  try {
    const table = bytes.indexOf(EXTENDED_OFFSETS, 132);
    const data = dicomParser.parseDicom(table < 0 ? head : head.subarray(0, table), { untilTag: 'x7fe00010' });
    let pixel: { offset: number; length: number | null } | null = null;
    let extendedOffsets: DataSetHead['extendedOffsets'];
    if (table >= 0) {
      const offsets = longElementAt(bytes, table, 0x0001);
      const lengths = offsets && longElementAt(bytes, offsets.offset + offsets.length, 0x0002);
      const pixels = lengths && longElementAt(bytes, lengths.offset + lengths.length, 0x0010);
      if (!pixels) return head.length < size ? null : truncatedHead(where, size);
      extendedOffsets = { offsets: uint64s(bytes, offsets!), lengths: uint64s(bytes, lengths!) };
      pixel = { offset: pixels.offset, length: pixels.length === 0xffffffff ? null : pixels.length };
    } else {
      const e = data.elements.x7fe00010;
      pixel = e ? { offset: e.dataOffset, length: e.hadUndefinedLength ? null : e.length } : null;
    }
    // A head that ends between two elements parses: only the file's end says there is no pixel data.
    if (!pixel && head.length < size) return null;
    return {
      where,
      attrs: fileAttrs(data),
      transferSyntax: data.string('x00020010')?.replace(/\0/g, '').trim(),
      pixelData: pixel,
      ...(extendedOffsets && { extendedOffsets }),
    };
  } catch (err) {
    if (head.length < size) return null;
    const reason = parserMessage(err);
    if (/past end|overrun|overread|beyond|maxPosition/i.test(reason)) return truncatedHead(where, size);
    throw unreadable(`${where}: not a readable DICOM instance (${reason})`);
  }
}

function truncatedHead(where: string, size: number): never {
  throw unreadable(
    `${where}: not a readable DICOM instance (truncated: the data set goes past the file's end at byte ${size})`,
  );
}

/** An OV value's unsigned 64-bit numbers (little endian). */
function uint64s(bytes: Buffer, value: { offset: number; length: number }): Float64Array {
  return Float64Array.from({ length: value.length / 8 }, (_, k) => Number(bytes.readBigUInt64LE(value.offset + k * 8)));
}

/** The size of the next head to try after `head` bytes: `first`, then four times more. */
export const nextHead = (head: number, size: number, first = HEAD) => Math.min(size, head ? head * 4 : first);

/** An instance's data set from the head of its file, read in growing pieces until the pixel data
 *  (or the file's end). */
export function readInstance(path: string): FileInstance {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    for (let head = nextHead(0, size); ; head = nextHead(head, size)) {
      const bytes = Buffer.allocUnsafe(head);
      readSync(fd, bytes, 0, head, 0);
      const found = instanceFromHead(bytes, size, path);
      if (found) return { ...found, path };
    }
  } finally {
    closeSync(fd);
  }
}

/** An uncompressed instance's frames, rows x columns x 3 bytes one after another: their byte
 *  ranges in a file of `size` bytes, which must hold them all. */
export function nativeFrames(i: DataSetHead, size: number): Float64Array {
  const count = framesOf(i);
  const { offset, length } = i.pixelData!;
  const bytes = i.attrs.number('00280010')! * i.attrs.number('00280011')! * 3;
  const held = Math.floor(Math.min(length!, size - offset) / bytes);
  if (held < count)
    throw unreadable(
      `${i.where}: holds ${held} of its ${count} frames (NumberOfFrames): ${length! > size - offset ? `truncated at byte ${size}` : `frame ${held + 1} is missing`}`,
    );
  const frames = new Float64Array(count * 2);
  for (let f = 0; f < count; f++) frames.set([offset + f * bytes, bytes], f * 2);
  return frames;
}

/** An encapsulated instance's frame count, no more than a file of `size` bytes can hold (an
 *  8-byte item header a frame after the offset table's): checked before anything is sized by it. */
export function encapsulatedFrames(i: DataSetHead, size: number): number {
  const count = framesOf(i);
  const most = Math.floor((size - i.pixelData!.offset) / 8) - 1;
  if (count > most)
    throw unreadable(
      `${i.where}: NumberOfFrames (0028,0008) is ${count}, but its pixel data (from byte ${i.pixelData!.offset} of ${size}) has room for at most ${Math.max(0, most)} frames`,
    );
  return count;
}

/** The frames' byte ranges: one fragment a frame after the basic offset table (encapsulated), or
 *  frames of rows x columns x 3 bytes one after another (uncompressed). A fragment past the
 *  file's end is a truncated instance; fewer fragments than NumberOfFrames, a missing frame. */
export function locateFrames(i: FileInstance): Float64Array {
  if (i.frames) return i.frames;
  if (!i.pixelData) throw unreadable(`${i.path}: no pixel data`);
  const fd = openSync(i.path, 'r');
  try {
    const size = fstatSync(fd).size;
    const { offset, length } = i.pixelData;
    if (length !== null) return (i.frames = nativeFrames(i, size));
    const count = encapsulatedFrames(i, size);
    const frames = new Float64Array(count * 2);
    const header = Buffer.alloc(8);
    let at = offset;
    let fragment = -1; // the basic offset table comes first
    while (fragment < count) {
      if (readSync(fd, header, 0, 8, at) < 8) break;
      const [group, element, len] = [header.readUInt16LE(0), header.readUInt16LE(2), header.readUInt32LE(4)];
      if (group !== 0xfffe || element !== 0xe000) break; // the sequence delimiter, or damage
      if (at + 8 + len > size)
        throw unreadable(
          `${i.path}: truncated: frame ${fragment + 1} of ${count} goes past the file's end at byte ${size}`,
        );
      if (fragment >= 0) frames.set([at + 8, len], fragment * 2);
      fragment++;
      at += 8 + len;
    }
    if (fragment < count)
      throw unreadable(
        `${i.path}: holds ${Math.max(0, fragment)} of its ${count} frames (NumberOfFrames): frame ${Math.max(0, fragment) + 1} is missing${at >= size ? ` (the file ends at byte ${size})` : ''}`,
      );
    if (
      readSync(fd, header, 0, 8, at) === 8 &&
      header.readUInt16LE(0) === 0xfffe &&
      header.readUInt16LE(2) === 0xe000
    ) {
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${i.path}: more pixel data fragments than its ${count} frames: frames split across fragments are not read`,
      );
    }
    return (i.frames = frames);
  } finally {
    closeSync(fd);
  }
}

/** The DICOM files of a slide given as a folder (every DICOM file in it), or as one instance
 *  (the instances of its series in its folder). */
export function seriesFiles(path: string): FileInstance[] {
  const folder = statSync(path).isDirectory();
  const dir = folder ? path : join(path, '..');
  const names = readdirSync(dir).sort();
  const files = names
    .map((n) => join(dir, n))
    .filter((p) => (extname(p).toLowerCase() === '.dcm' || isDicomFile(p)) && statSync(p).isFile());
  const instances = files.map(readInstance);
  if (folder) return instances;
  const series = seriesOf(readInstance(path));
  return instances.filter((i) => seriesOf(i) === series);
}
