// Each file's sha256 kept between loads of a package, so that every worker (and --check-config)
// does not read gigabytes of unchanged weights again: 1 GiB is about a second of CPU per process.
// A file is taken as unchanged the way git's index decides it: same path, device, inode, size,
// and mtime and ctime to the nanosecond. ctime cannot be set by a user (utimes moves it), so an
// edit in place that keeps the size and sets the mtime back is still seen. The cache only saves
// reading: the package digest is computed from these per-file sums exactly as without it.
//
// One file per package folder, <folder>/package-digests/<name>-<hash of its path>.json, written
// to a temp file and renamed over, so workers loading together never read a torn one. A cache
// that cannot be parsed, is of another format or another folder is ignored: every file is hashed.
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
  type BigIntStats,
} from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { Type } from 'typebox';
import { Value } from 'typebox/value';

/** Where the service may write (the config's data_dir), and who hears that the cache failed. */
export interface DigestCacheOptions {
  folder: string;
  warn?: (message: string) => void;
  /** Use what is there, write nothing (--check-config creates no file, and may run as another user). */
  readOnly?: boolean;
}

/** What fileDigest asks of the cache for one file, by the stat of the file it opened. */
export interface CachedFile {
  get(opened: BigIntStats): string | undefined;
  set(opened: BigIntStats, read: BigIntStats, sha256: string): void;
}

const FORMAT = 'tile-package-digests/1';
const Sha256 = Type.String({ pattern: '^[0-9a-f]{64}$' });
const CacheFile = Type.Object({
  format: Type.Literal(FORMAT),
  dir: Type.String(),
  files: Type.Record(Type.String(), Type.Object({ stat: Type.String(), sha256: Sha256 })),
});
/** By the file's path in the package (a Map: a file may be called __proto__). */
type Entries = Map<string, { stat: string; sha256: string }>;

/** A file whose ctime is this close to now may still change within the same clock tick and keep
 *  its ctime (git's "racily clean" entries): it is hashed, not cached, until it is older. */
const RACY_NS = 1_000_000_000n;

/** A cache file's most bytes: a few hundred per file of a package, and packages have few files. */
const MAX_CACHE_BYTES = 4 * 1024 * 1024;

/** The cache file's text, if it is a regular file of at most MAX_CACHE_BYTES. Opened without
 *  blocking, so that a FIFO put there cannot hang a worker's load, and checked by its fstat. */
function readCacheFile(file: string): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new Error('not a regular file');
    if (stat.size > MAX_CACHE_BYTES) throw new Error(`${stat.size} bytes, more than ${MAX_CACHE_BYTES}`);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

const statKey = (s: BigIntStats) => [s.dev, s.ino, s.size, s.mtimeNs, s.ctimeNs].join(':');

export class DigestCache {
  private readonly file: string;
  private readonly dir: string;
  private readonly known: Entries;
  private readonly next: Entries = new Map();

  constructor(
    dir: string,
    private readonly options: DigestCacheOptions,
  ) {
    this.dir = resolve(dir);
    const id = createHash('sha256').update(this.dir).digest('hex').slice(0, 16);
    this.file = join(options.folder, 'package-digests', `${basename(this.dir)}-${id}.json`);
    this.known = this.read();
  }

  private read(): Entries {
    let raw: unknown;
    try {
      raw = JSON.parse(readCacheFile(this.file));
    } catch (err) {
      const { code, message } = err as NodeJS.ErrnoException;
      // None yet (and where the folder cannot be, writing it says why).
      if (code !== 'ENOENT' && code !== 'ENOTDIR')
        this.options.warn?.(`package digest cache ${this.file} ignored (${message}): hashing`);
      return new Map();
    }
    if (!Value.Check(CacheFile, raw) || raw.dir !== this.dir) {
      this.options.warn?.(`package digest cache ${this.file} ignored (not one of ${this.dir}): hashing`);
      return new Map();
    }
    return new Map(Object.entries(raw.files));
  }

  /** The cache's part in hashing `file` (relative to the package folder). */
  entry(file: string): CachedFile {
    return {
      get: (opened) => {
        const known = this.known.get(file);
        if (known?.stat !== statKey(opened)) return undefined;
        this.next.set(file, known);
        return known.sha256;
      },
      set: (opened, read, sha256) => {
        const stat = statKey(opened);
        // Changed while it was read, or too recently to trust its ctime: hashed again next time.
        const now = BigInt(Date.now()) * 1_000_000n;
        if (statKey(read) === stat && opened.ctimeNs < now - RACY_NS) this.next.set(file, { stat, sha256 });
      },
    };
  }

  /** Writes what this hashing found when it differs from what was read (files hashed, or gone). */
  save(): void {
    if (this.options.readOnly) return;
    const files = Object.fromEntries(this.next);
    if (JSON.stringify(files) === JSON.stringify(Object.fromEntries(this.known))) return;
    const temp = `${this.file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    let wrote = false;
    try {
      mkdirSync(join(this.options.folder, 'package-digests'), { recursive: true });
      wrote = true;
      writeFileSync(temp, JSON.stringify({ format: FORMAT, dir: this.dir, files }));
      renameSync(temp, this.file);
    } catch (err) {
      // A temp file begun (a full disk, say) is not left behind.
      if (wrote) rmSync(temp, { force: true });
      this.options.warn?.(
        `package digest cache ${this.file} not written (${(err as Error).message}): the next load hashes again`,
      );
    }
  }
}
