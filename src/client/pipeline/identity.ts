// Which slide an output folder's files belong to. Outputs are named after the slide's stem (the
// CLAM/TRIDENT convention), so each stem in a folder is owned by one slide, recorded in
// .journal/STEM.slide.json with its path and a content fingerprint: the size and a SHA-256 of the
// first and last MiB (a slide's header, first tiles and directories; 2 MiB read however large the
// slide). Another slide with the same stem is refused before any work; the same file changed since
// (same path, another fingerprint) starts afresh; the same content moved or copied resumes.
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CodedError } from '../../lib/errors.js';
import { writeFileAtomic } from './outputs.js';

const MIB = 1 << 20;

export interface SlideIdentity {
  /** Absolute path. */
  path: string;
  size: number;
  mtimeMs: number;
  sha256: string;
}

/** What a finished slide leaves in the journal folder for a model: reruns skip it from this. */
export interface DoneRecord {
  sha256: string;
  tiles: number;
  seconds: number;
  files: string[];
}

export function fingerprint(path: string): SlideIdentity {
  const abs = resolve(path);
  const st = statSync(abs);
  const hash = createHash('sha256').update(`${st.size}\n`);
  if (st.size <= 2 * MIB) hash.update(readFileSync(abs));
  else {
    const fd = openSync(abs, 'r');
    try {
      const chunk = Buffer.allocUnsafe(MIB);
      for (const at of [0, st.size - MIB]) hash.update(chunk.subarray(0, readSync(fd, chunk, 0, MIB, at)));
    } finally {
      closeSync(fd);
    }
  }
  return { path: abs, size: st.size, mtimeMs: st.mtimeMs, sha256: hash.digest('hex') };
}

/** A remote slide's identity: its URL, ETag and size (its content is not read for it). */
export const remoteIdentity = ({ url, etag, size }: { url: string; etag: string; size: number }): SlideIdentity => ({ path: url, size, mtimeMs: 0, sha256: createHash('sha256').update(`${url}\n${etag}\n${size}`).digest('hex') });

/** A slide whose outputs' name an earlier run gave another slide in the same output folder. */
export class NameClashError extends CodedError<'TILE_ERR_COHORT_NAME_CLASH'> {
  override name = 'NameClashError';
}

export class SlideRecords {
  constructor(
    private readonly journalDir: string,
    private readonly stem: string,
    private readonly model: string,
  ) {}

  private get ownerPath() {
    return join(this.journalDir, `${this.stem}.slide.json`);
  }

  private get donePath() {
    return join(this.journalDir, `${this.stem}.${this.model}.done.json`);
  }

  private read<T>(path: string): T | null {
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as T;
    } catch {
      return null;
    }
  }

  /** The done record, when the slide at `path` is the one that finished here and has not
   *  changed: from its size and modification time alone (no read of the slide), else from its
   *  fingerprint (a copy or a touched file with the same content). `st` null: a remote slide,
   *  known by its identity alone. */
  finished(path: string, identity?: () => SlideIdentity, st: { size: number; mtimeMs: number } | null = statSync(path)): DoneRecord | null {
    const done = this.read<DoneRecord>(this.donePath);
    const owner = this.read<SlideIdentity>(this.ownerPath);
    if (!done || !owner || done.sha256 !== owner.sha256) return null;
    if (st && owner.path === resolve(path) && owner.size === st.size && owner.mtimeMs === st.mtimeMs) return done;
    return identity?.().sha256 === done.sha256 ? done : null;
  }

  /** Makes `id` the stem's owner before any work: another slide's stem is a NameClashError; the
   *  owner's own file changed since drops what was made from the old content. */
  claim(id: SlideIdentity, stale: string[]): void {
    const owner = this.read<SlideIdentity>(this.ownerPath);
    if (owner && owner.sha256 !== id.sha256) {
      if (owner.path !== id.path) throw new NameClashError('TILE_ERR_COHORT_NAME_CLASH', `${id.path}: its outputs would be named "${this.stem}", which this output folder already holds for ${owner.path}, another slide; rename one of them or use another --out`);
      for (const file of [this.donePath, ...stale]) rmSync(file, { force: true });
    }
    if (!owner || owner.sha256 !== id.sha256 || owner.path !== id.path || owner.mtimeMs !== id.mtimeMs) writeFileAtomic(this.ownerPath, JSON.stringify(id) + '\n');
  }

  markDone(record: DoneRecord): void {
    writeFileAtomic(this.donePath, JSON.stringify(record) + '\n');
  }

  exists(): boolean {
    return existsSync(this.ownerPath);
  }
}
