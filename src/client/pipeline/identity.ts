// Which slide an output folder's files belong to, and the plan that made them. Outputs are named
// after the slide's stem (the CLAM/TRIDENT convention), so each stem in a folder is owned by one
// slide, recorded in .journal/STEM.slide.json with where it is and a SHA-256 of its whole content.
// Another slide with the same stem is refused before any work; the same file changed since starts
// afresh; the same content moved or copied resumes. A finished slide is skipped only when its
// content and its plan (model, tile, MPP, --min-tissue, tissue model, outputs) are the same.
//
// A slide's content is read whole (streamed) unless its source can say cheaply that it has not
// changed: a file whose device, inode, size, mtime and ctime are those recorded has not been
// written since (any write sets ctime, which no system call sets back). Other slide sources
// add their own SourceIdentity to IDENTITY_SOURCES: a DICOM series is its UID, an http(s) or s3
// slide its URL, ETag and size.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CodedError } from '../../lib/errors.js';
import { writeFileAtomic } from './outputs.js';
import { dicomKind, dicomSeries } from '../slide/dicom/open-dicom.js';
import { isRemote, openSource } from '../slide/remote/open-source.js';
import type { ByteSource } from '../slide/remote/source.js';

/** How a slide source says what a slide is. */
export interface SourceIdentity {
  /** Where it is: an absolute path, a URL. */
  location: string;
  /** Changes whenever the content may have, got without reading the content. */
  quick(): Promise<string>;
  /** A digest of the whole content (hex). */
  digest(): Promise<string>;
  /** A remote slide's bytes, opened once for its identity and handed on to its reader. */
  bytes?: () => Promise<ByteSource>;
}

/** A file on a file system: the path, its stat, a SHA-256 streamed over the whole file. */
export function fileIdentity(path: string): SourceIdentity {
  const location = resolve(path);
  return {
    location,
    quick: async () => {
      const st = statSync(location, { bigint: true });
      return `file ${st.dev}:${st.ino} ${st.size} bytes, mtime ${st.mtimeNs}, ctime ${st.ctimeNs}`;
    },
    digest: async () => {
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(location, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
      return hash.digest('hex');
    },
  };
}

/** A DICOM slide (a folder or file of a series, local or remote, a DICOMweb URL) is its series,
 *  whose UID changes with its content (DICOM's rule), wherever the copy lies. A study URL that
 *  could not be expanded, or a local folder without a series, is its location: it fails at
 *  opening, with the reason; a remote path without a DICOM instance fails here, with the same. */
export function dicomIdentity(path: string): SourceIdentity | null {
  const kind = dicomKind(path);
  if (!kind) return null;
  const location = kind === 'dicom' ? resolve(path) : path;
  let found: ReturnType<typeof dicomSeries> | undefined;
  const series = () => (found ??= dicomSeries(path));
  const quick = async () => `DICOM series ${(await series()).uid ?? `at ${location}`}`;
  return {
    location,
    quick,
    digest: async () =>
      createHash('sha256')
        .update(`${await quick()}\n`)
        .digest('hex'),
    // A remote series' first instance, opened for its UID.
    bytes: kind === 'remote' ? async () => (await series()).source! : undefined,
  };
}

/** An http(s) or s3 slide is its URL, ETag and size, from its first range request (its content is
 *  not read for it; a server that gives no ETag leaves the URL and size). */
export function remoteIdentity(location: string): SourceIdentity | null {
  if (!isRemote(location)) return null;
  let opened: Promise<ByteSource> | undefined;
  const bytes = () => (opened ??= openSource(location));
  const quick = async () => {
    const { etag, size } = await bytes();
    return `ETag ${etag || '(none)'}, ${size} bytes`;
  };
  return {
    location,
    quick,
    digest: async () =>
      createHash('sha256')
        .update(`${location}\n${await quick()}`)
        .digest('hex'),
    bytes,
  };
}

/** The sources asked in order, each taking the locations it knows (a URL scheme, ...); files last.
 *  DICOMweb URLs are http(s): DICOM comes first. */
export const IDENTITY_SOURCES: ((location: string) => SourceIdentity | null)[] = [dicomIdentity, remoteIdentity];

export const identityOf = (location: string): SourceIdentity =>
  IDENTITY_SOURCES.reduce<SourceIdentity | null>((found, source) => found ?? source(location), null) ??
  fileIdentity(location);

/** What made a slide's outputs. `mpp` is null (and `mppSource` "slide") before the slide is
 *  opened: whatever the slide records. */
export interface SlidePlan {
  model: string;
  version: string;
  sha256: string;
  tile: number;
  tileMpp: number;
  minTissue: number;
  tissueModel: string;
  tissueSha256: string;
  mpp: number | null;
  mppSource: 'manifest' | '--mpp' | 'slide';
  outputs: string[];
}

const LABELS: [keyof SlidePlan, string][] = [
  ['model', 'model'],
  ['version', 'model version'],
  ['sha256', 'model package sha256'],
  ['tile', 'tile size'],
  ['tileMpp', 'tile MPP'],
  ['minTissue', '--min-tissue'],
  ['tissueModel', '--tissue-model'],
  ['tissueSha256', 'tissue model sha256'],
];

/** What differs between the plan a slide was done with and the one asked now, outputs aside. */
export function planChanges(before: SlidePlan, now: SlidePlan): string[] {
  const changes = LABELS.filter(([k]) => before[k] !== now[k]).map(
    ([k, label]) => `${label} ${before[k]} -> ${now[k]}`,
  );
  const mppNow = now.mpp ?? (before.mppSource === 'slide' ? before.mpp : null);
  if (mppNow !== before.mpp || (now.mpp === null && before.mppSource !== 'slide'))
    changes.push(`slide MPP ${before.mpp} (${before.mppSource}) -> ${now.mpp ?? "the slide's own"} (${now.mppSource})`);
  return changes;
}

/** A slide that this output folder holds for another slide, or under another plan (--no-overwrite). */
export class OutFolderError extends CodedError<'TILE_ERR_COHORT_NAME_CLASH' | 'TILE_ERR_COHORT_PLAN_CHANGED'> {
  override name = 'OutFolderError';
}

interface Owner {
  location: string;
  quick: string;
  sha256: string;
}

/** What a finished slide leaves in the journal folder for a model: reruns skip it from this. */
export interface DoneRecord {
  sha256: string;
  plan: SlidePlan;
  tiles: number;
  seconds: number;
  files: string[];
}

/** Where the tissue mask came from: reused only for the same content, tissue model and MPP. */
export interface TissueRecord {
  slide: string;
  model: string;
  sha256: string;
  mpp: number;
}

const read = <T>(path: string): T | null => {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as T;
  } catch {
    return null;
  }
};

export class SlideRecords {
  private readonly ownerPath: string;
  private readonly donePath: string;
  private readonly tissuePath: string;

  constructor(
    journalDir: string,
    private readonly stem: string,
    model: string,
  ) {
    this.ownerPath = join(journalDir, `${stem}.slide.json`);
    this.donePath = join(journalDir, `${stem}.${model}.done.json`);
    this.tissuePath = join(journalDir, `${stem}.tissue.json`);
  }

  /** The content's digest, read only when the stat (or the source's token) differs from the
   *  owner's. Makes the slide the stem's owner: another slide's stem is refused; the
   *  owner's own file changed since drops what was made from the old content (`stale`). */
  async claim(id: SourceIdentity, stale: string[]): Promise<string> {
    const owner = read<Owner>(this.ownerPath);
    const quick = await id.quick();
    const sha256 = owner && owner.location === id.location && owner.quick === quick ? owner.sha256 : await id.digest();
    if (owner && owner.sha256 !== sha256) {
      if (owner.location !== id.location)
        throw new OutFolderError(
          'TILE_ERR_COHORT_NAME_CLASH',
          `${id.location}: its outputs would be named "${this.stem}", which this output folder already holds for ${owner.location}, another slide (another content); rename one of them or use another --out`,
        );
      for (const file of [this.donePath, this.tissuePath, ...stale]) rmSync(file, { force: true });
    }
    if (!owner || owner.sha256 !== sha256 || owner.location !== id.location || owner.quick !== quick)
      writeFileAtomic(this.ownerPath, JSON.stringify({ location: id.location, quick, sha256 }) + '\n');
    return sha256;
  }

  /** The done record of this content, if any. */
  done(sha256: string): DoneRecord | null {
    const done = read<DoneRecord>(this.donePath);
    return done?.sha256 === sha256 && done.plan ? done : null;
  }

  undone(): void {
    rmSync(this.donePath, { force: true });
  }

  markDone(record: DoneRecord): void {
    writeFileAtomic(this.donePath, JSON.stringify(record) + '\n');
  }

  /** Whether the mask at `maskPath` was made as `now` would make it. */
  tissueMatches(maskPath: string, now: TissueRecord): boolean {
    return existsSync(maskPath) && JSON.stringify(read<TissueRecord>(this.tissuePath)) === JSON.stringify(now);
  }

  markTissue(record: TissueRecord): void {
    writeFileAtomic(this.tissuePath, JSON.stringify(record) + '\n');
  }
}
