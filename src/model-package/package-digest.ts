// The sha256 of a model package: every file of the folder (manifest, graph, external weights),
// so other weights under the same model.onnx give another hash. Symlinks are followed, as
// `find -L` does: weights linked in from shared storage are what the package serves, so they
// must be in its hash. Reproducible from a shell:
//   (cd models/<name> && find -L . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum)
import { createHash } from 'node:crypto';
import { closeSync, fstatSync, openSync, readdirSync, readSync, statSync, type Stats } from 'node:fs';
import { join, relative } from 'node:path';
import { DigestCache, type CachedFile, type DigestCacheOptions } from './digest-cache.js';
import { PackageError } from './package-error.js';

const unreadable = (path: string, what: string): never => {
  throw new PackageError('TILE_ERR_PACKAGE_FILE_UNREADABLE', `${path}: ${what}`);
};

/** stat through symlinks, a failure named by the path in the package. */
function follow(path: string): Stats {
  try {
    return statSync(path);
  } catch (err) {
    const { code, message } = err as NodeJS.ErrnoException;
    if (code === 'ELOOP') return unreadable(path, 'a symlink loop (the links lead back to themselves)');
    if (code === 'ENOENT') return unreadable(path, 'a symlink to nothing (its target does not exist)');
    return unreadable(path, `cannot stat: ${message}`);
  }
}

/** Regular files under dir, symlinks followed, relative paths, in byte order (as LC_ALL=C sort).
 *  A directory that leads back to one of its own ancestors is refused (find -L calls it a file
 *  system loop and skips it; the service would walk it forever). Sockets, FIFOs and devices are
 *  left out, as `find -type f` does (reading a FIFO would block the load). */
export function packageFiles(dir: string): string[] {
  const files: string[] = [];
  const walk = (folder: string, ancestors: string[]): void => {
    let names: string[];
    try {
      names = readdirSync(folder);
    } catch (err) {
      return unreadable(folder, `cannot list: ${(err as Error).message}`);
    }
    for (const name of names) {
      const path = join(folder, name);
      const s = follow(path);
      if (s.isFile()) files.push(relative(dir, path));
      else if (s.isDirectory()) {
        const id = `${s.dev}:${s.ino}`;
        if (ancestors.includes(id)) unreadable(path, 'a symlink loop (it leads back to a folder above it)');
        walk(path, [...ancestors, id]);
      }
    }
  };
  const top = follow(dir);
  walk(dir, [`${top.dev}:${top.ino}`]);
  return files.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/** Files are hashed in chunks: readFileSync stops at 2 GiB, and external-data weights pass that. */
const CHUNK = 4 * 1024 * 1024;

/** sha256 of one file, read in chunks; a failure names the file. With a cache, the stat of the
 *  file opened (not of the path, which may be replaced meanwhile) decides whether it is read. */
export function fileDigest(path: string, cached?: CachedFile): string {
  const hash = createHash('sha256');
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const opened = cached && fstatSync(fd, { bigint: true });
    const known = opened && cached.get(opened);
    if (known) return known;
    const chunk = Buffer.allocUnsafe(CHUNK);
    for (let n: number; (n = readSync(fd, chunk, 0, CHUNK, null)) > 0; ) hash.update(chunk.subarray(0, n));
    const sha256 = hash.digest('hex');
    if (cached && opened) cached.set(opened, fstatSync(fd, { bigint: true }), sha256);
    return sha256;
  } catch (err) {
    return unreadable(path, `cannot read: ${(err as Error).message}`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** sha256 of the lines "<sha256 of file>  <path>\n", as sha256sum prints them. With a cache
 *  folder (the service's data_dir), files unchanged since they were last hashed are not read. */
export function packageDigest(dir: string, cache?: DigestCacheOptions): string {
  const sums = cache && new DigestCache(dir, cache);
  const listing = packageFiles(dir)
    .map((file) => `${fileDigest(join(dir, file), sums?.entry(file))}  ${file}\n`)
    .join('');
  sums?.save();
  return createHash('sha256').update(listing).digest('hex');
}
