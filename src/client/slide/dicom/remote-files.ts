// DICOM WSI files where they live, read by range requests: an s3:// folder of instances (the
// Imaging Data Commons keeps a series as one object per instance under a folder of its own), one
// instance of it (its series, from that folder, as for a local file), or one instance at an
// http(s):// URL (HTTP cannot list a folder: that instance alone). Each instance's head is read
// until its pixel data, its frames are placed by its Extended or Basic Offset Table, and then only
// the frames the grid uses are fetched. An encapsulated instance with neither table is refused:
// finding its frames would read it whole.
import { isRemote, openSource } from '../remote/open-source.js';
import { listS3Folder } from '../remote/s3-source.js';
import { BLOCK, type ByteSource } from '../remote/source.js';
import { SlideError, type FrameBytes } from '../slide.js';
import { byInstance, DicomSlide, type FrameAt, type FrameSource } from './dicom-slide.js';
import {
  encapsulatedFrames,
  instanceFromHead,
  isDicomHead,
  nativeFrames,
  nextHead,
  unreadable,
  type DataSetHead,
} from './files.js';
import { buildPyramid, seriesOf, wsiInstances } from './pyramid.js';

export interface RemoteInstance extends DataSetHead {
  source: ByteSource;
  /** Each frame's byte range, its item header included when `items` (encapsulated). */
  frames?: Float64Array;
  items?: boolean;
}

/** An s3:// folder (a URL ending in "/"), or an http(s) or s3 URL of a .dcm file. */
export function isRemoteDicom(path: string): boolean {
  if (!isRemote(path)) return false;
  if (/^s3:\/\/[^/]+\/(.*\/)?$/i.test(path)) return true;
  return /\.dcm$/i.test(new URL(path).pathname);
}

const SEQUENCE_ITEM = 0xe000fffe; // (FFFE,E000) read as one little-endian uint32
const SEQUENCE_END = 0xe0ddfffe; // (FFFE,E0DD)

/** Frames' ranges from the Extended Offset Table, or from the Basic Offset Table (a frame runs to
 *  the next one's item; the last one's length from its item header, the sequence's end right
 *  after it). Each frame's item header is checked as it arrives (RemoteFrames). */
async function locateFrames(i: RemoteInstance): Promise<void> {
  const { source, where } = i;
  if (!i.pixelData) throw unreadable(`${where}: no pixel data`);
  const { offset, length } = i.pixelData;
  if (length !== null) {
    [i.frames, i.items] = [nativeFrames(i, source.size), false];
    return;
  }
  const count = encapsulatedFrames(i, source.size);
  const frames = new Float64Array(count * 2);
  const item = new DataView((await source.read(offset, 8)).slice().buffer);
  if (item.byteLength < 8 || item.getUint32(0, true) !== SEQUENCE_ITEM)
    throw unreadable(`${where}: the encapsulated pixel data does not start with its offset table's item`);
  const tableLength = item.getUint32(4, true);
  const first = offset + 8 + tableLength;
  if (i.extendedOffsets) {
    const { offsets, lengths } = i.extendedOffsets;
    if (Math.min(offsets.length, lengths.length) < count)
      throw unreadable(
        `${where}: its Extended Offset Table places ${Math.min(offsets.length, lengths.length)} of its ${count} frames`,
      );
    for (let f = 0; f < count; f++) frames.set([first + offsets[f], 8 + lengths[f]], f * 2);
  } else {
    if (tableLength === 0)
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${where}: no offset table (its Basic Offset Table is empty and it has no Extended Offset Table): finding its frames would read the whole file; copy it here, or serve it by DICOMweb`,
      );
    const table = new DataView((await source.read(offset + 8, tableLength)).slice().buffer);
    if (table.byteLength / 4 < count)
      throw unreadable(`${where}: its Basic Offset Table places ${table.byteLength / 4} of its ${count} frames`);
    const starts = Array.from({ length: count }, (_, f) => first + table.getUint32(f * 4, true));
    const past = starts.findIndex((at) => at + 8 > source.size);
    if (past >= 0)
      throw unreadable(
        `${where}: truncated: frame ${past + 1} of ${count} lies past the file's end at byte ${source.size}`,
      );
    const lastItem = new DataView((await source.read(starts[count - 1], 8)).slice().buffer);
    if (lastItem.byteLength < 8 || lastItem.getUint32(0, true) !== SEQUENCE_ITEM)
      throw unreadable(`${where}: frame ${count} is missing (no item where its offset table places it)`);
    starts.push(starts[count - 1] + 8 + lastItem.getUint32(4, true));
    // The last frame is one fragment when the sequence ends right after it.
    const after = await source.read(starts[count], 8);
    if (after.length === 8 && Buffer.from(after).readUInt32LE(0) !== SEQUENCE_END)
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${where}: frame ${count} goes on in another fragment: frames split across fragments are not read`,
      );
    for (let f = 0; f < count; f++) {
      if (starts[f + 1] <= starts[f])
        throw unreadable(`${where}: its Basic Offset Table is out of order at frame ${f + 1}`);
      frames.set([starts[f], starts[f + 1] - starts[f]], f * 2);
    }
  }
  for (let f = 0; f < count; f++)
    if (frames[f * 2] + frames[f * 2 + 1] > source.size)
      throw unreadable(
        `${where}: truncated: frame ${f + 1} of ${count} goes past the file's end at byte ${source.size}`,
      );
  [i.frames, i.items] = [frames, true];
}

/** The most of an instance read before its pixel data (its data set, per-frame positions
 *  included): past it, a file is not read on (it would be read whole). */
const MAX_HEAD = 32 * 1024 * 1024;

/** An instance's head, read in growing ranges from the block its source opened with. */
async function readHead(source: ByteSource): Promise<RemoteInstance> {
  for (let head = nextHead(0, source.size, BLOCK); ; head = nextHead(head, source.size, BLOCK)) {
    if (head > MAX_HEAD)
      throw new SlideError(
        'TILE_ERR_SLIDE_FORMAT',
        `${source.url}: no pixel data in its first ${MAX_HEAD} bytes: not read on, which could read the whole file`,
      );
    const found = instanceFromHead(await source.read(0, head), source.size, source.url);
    if (found) return { ...found, source };
  }
}

/** Each instance's block cache: its head and offset table (frames are fetched once, for a band). */
const INSTANCE_CACHE = 4 * 1024 * 1024;

/** Heads already read, by their source: the identity's instance is not read again by its reader
 *  (a head can be larger than the source's block cache). */
const headsRead = new WeakMap<ByteSource, RemoteInstance>();

/** Instances opened a few at a time (one request each for the first block), non-DICOM objects
 *  skipped; `opened` is the one the caller has open already. */
async function openInstances(urls: string[], opened?: ByteSource): Promise<RemoteInstance[]> {
  const out: RemoteInstance[] = [];
  for (let k = 0; k < urls.length; k += 8) {
    const batch = await Promise.all(
      urls.slice(k, k + 8).map(async (url) => {
        const source = url === opened?.url ? opened : await openSource(url, INSTANCE_CACHE);
        const read = headsRead.get(source);
        if (read) return read;
        if (isDicomHead(source.transport.first)) return readHead(source);
        source.close();
        return null;
      }),
    );
    for (const i of batch) if (i) out.push(i);
  }
  return out;
}

/** The objects of a folder path (ending in "/"): an s3 folder's; an http(s) folder cannot be
 *  listed. */
async function folderObjects(path: string): Promise<string[]> {
  if (!/^s3:/i.test(path))
    throw new SlideError(
      'TILE_ERR_SLIDE_MISSING',
      `${path}: an http(s) folder cannot be listed; give one instance's URL, an s3:// folder, or the series' DICOMweb URL`,
    );
  return listS3Folder(path);
}

/** The instances of the series a path names: an s3 folder's, an s3 instance's in its folder, or
 *  an http(s) instance alone. `opened`: one of them, open already (by the slide's identity). */
async function seriesInstances(path: string, opened?: ByteSource): Promise<RemoteInstance[]> {
  if (path.endsWith('/')) {
    const all = await openInstances(await folderObjects(path), opened);
    if (!all.length) throw noDicomIn(path);
    return all;
  }
  const named = await namedInstance(path, opened);
  if (!/^s3:/i.test(path)) return [named];
  const series = seriesOf(named);
  const others = await openInstances((await listS3Folder(path)).filter((url) => url !== path));
  for (const o of others) if (seriesOf(o) !== series) o.source.close();
  return [named, ...others.filter((o) => seriesOf(o) === series)];
}

const noDicomIn = (folder: string) =>
  new SlideError('TILE_ERR_SLIDE_MISSING', `${folder}: no DICOM file in this folder`);

/** The instance a URL names, open; a file that is not DICOM fails, saying so. */
async function namedInstance(url: string, opened?: ByteSource): Promise<RemoteInstance> {
  const [named] = await openInstances([url], opened ?? (await openSource(url, INSTANCE_CACHE)));
  if (!named)
    throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${url}: not a DICOM file (no "DICM" after its 128-byte preamble)`);
  return named;
}

/** A remote DICOM path's series UID, from its first instance (a folder's first DICOM object), with
 *  that instance's source left open for the slide's reader (openRemoteDicom's `opened`), which
 *  takes the head read here: it is fetched once. A path with no DICOM instance fails as opening it
 *  would, and a server that cannot be reached fails here: a slide's identity is never guessed. */
export async function remoteSeries(path: string): Promise<{ uid: string | null; source: ByteSource }> {
  const first = async () => {
    if (!path.endsWith('/')) return namedInstance(path);
    for (const url of await folderObjects(path)) {
      const [instance] = await openInstances([url]);
      if (instance) return instance;
    }
    throw noDicomIn(path);
  };
  const instance = await first();
  headsRead.set(instance.source, instance);
  return { uid: seriesOf(instance) || null, source: instance.source };
}

/** Frames fetched by range, an instance's neighbours in one request, into shared memory (the
 *  thread decoding them reads them where they are); each item header checked and left out. */
class RemoteFrames implements FrameSource {
  constructor(private readonly instances: RemoteInstance[]) {}

  async frames(at: FrameAt[]): Promise<FrameBytes[]> {
    const out: FrameBytes[] = new Array(at.length);
    await Promise.all(
      [...byInstance(at)].map(async ([instance, ks]) => {
        const i = this.instances[instance];
        const ranges = ks.map((k) => [i.frames![at[k].frame * 2], i.frames![at[k].frame * 2 + 1]] as const);
        const fetched = await i.source.readRanges(ranges);
        const skip = i.items ? 8 : 0;
        const shared = new Uint8Array(new SharedArrayBuffer(ranges.reduce((n, [, l]) => n + l - skip, 0)));
        let to = 0;
        fetched.forEach((bytes, j) => {
          const frame = at[ks[j]].frame + 1;
          if (i.items) {
            const head = Buffer.from(bytes.buffer, bytes.byteOffset, 8);
            if (head.readUInt32LE(0) !== SEQUENCE_ITEM)
              throw unreadable(`${i.where}: its offset table places frame ${frame} where no item starts`);
            // An odd-length frame's item is padded to even; its Extended Offset Table length may not be.
            if (Math.abs(head.readUInt32LE(4) - (bytes.length - 8)) > 1)
              throw new SlideError(
                'TILE_ERR_SLIDE_FORMAT',
                `${i.where}: frame ${frame} is not one fragment: frames split across fragments are not read`,
              );
          }
          shared.set(bytes.subarray(skip), to);
          out[ks[j]] = { bytes: shared.subarray(to, (to += bytes.length - skip)) };
        });
      }),
    );
    return out;
  }

  async close(): Promise<void> {
    for (const i of this.instances) i.source.close();
  }
}

/** A remote DICOM series as a slide; `opened`: the named object's source, when the caller has it. */
export async function openRemoteDicom(path: string, opened?: ByteSource): Promise<DicomSlide> {
  const all = await seriesInstances(path, opened);
  try {
    const instances = wsiInstances(path, all);
    for (const i of all) if (!instances.includes(i)) i.source.close();
    const pyramid = buildPyramid(path, instances);
    // Every level's frames placed now: a missing frame or a truncated file fails here.
    for (const l of pyramid.levels) await Promise.all(l.members.map((k) => locateFrames(instances[k])));
    return new DicomSlide(path, 'dicom', pyramid, new RemoteFrames(instances));
  } catch (err) {
    for (const i of all) i.source.close();
    throw err;
  }
}
