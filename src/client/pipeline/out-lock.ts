// One writer per output folder (per shard of one sharding): OUT/tile-infer.lock
// (tile-infer.I-of-C.lock for a shard) names the host, pid and start time of the run that holds
// it, as TRIDENT's lock files do.
// It is made whole in one step (a hard link of a file already written, which fails when the lock
// exists), so of two runs started together one gets it and the other fails at once, naming it;
// a lock left by a process that is gone (killed, on this host) is taken over with a note; the
// holder removes it when it exits.
import { hostname } from 'node:os';
import { join } from 'node:path';
import { linkSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Shard } from './cohort.js';
import { OutputError, writeFailed } from './outputs.js';
import { pidGone } from '../../lib/pid.js';

interface Holder {
  host: string;
  pid: number;
  started: string;
  command: string;
}

const LOCK_NAME = /^tile-infer(?:\.(\d+)-of-(\d+))?\.lock$/;

/** The run holding the lock at `path`, or null where its file cannot be read (being written this
 *  instant, or removed). */
function holderOf(path: string): Holder | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Holder;
  } catch {
    return null;
  }
}

const who = (holder: Holder | null) =>
  holder ? `pid ${holder.pid} on ${holder.host}, started ${holder.started}` : 'a run whose lock file cannot be read';

/** Takes `outDir`'s lock for this process, or throws TILE_ERR_OUTPUT_LOCKED naming its holder, or
 *  the holder of a lock whose slides may be this run's: a run of all the slides and a shard, or
 *  shards of two shardings (0/2 and 0/3), each hold a lock of their own, and had both posted and
 *  journalled the same slide (an attack session). `note` hears about a stale lock taken over. */
export function lockOutput(
  outDir: string,
  shard: Shard | null,
  note: (line: string) => void,
): { path: string; release: () => void } {
  const path = join(outDir, shard ? `tile-infer.${shard.index}-of-${shard.count}.lock` : 'tile-infer.lock');
  const me: Holder = {
    host: hostname(),
    pid: process.pid,
    started: new Date().toISOString(),
    command: process.argv.slice(2).join(' '),
  };
  const stale = (holder: Holder | null) => holder !== null && holder.host === me.host && pidGone(holder.pid);
  for (let attempt = 0; ; attempt++) {
    try {
      create(path, JSON.stringify(me) + '\n');
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw writeFailed(path, err);
    }
    const holder = holderOf(path);
    if (stale(holder) && attempt < 3) {
      note(`${path}: taking over the lock of pid ${holder!.pid} (started ${holder!.started}), which is gone`);
      rmSync(path, { force: true });
      continue;
    }
    if (!holder && attempt < 3) continue;
    throw new OutputError(
      'TILE_ERR_OUTPUT_LOCKED',
      `${outDir} is being written by another tile-infer (${who(holder)}; ${path}): wait for it, or use another --out; if that run is gone from another host, remove the lock file`,
    );
  }
  let held = true;
  const release = () => {
    if (held) rmSync(path, { force: true });
    held = false;
  };
  process.once('exit', release);
  // Taken first, then the others looked at: of two such runs started together, each sees the
  // other's, and neither goes on.
  for (const name of readdirSync(outDir)) {
    const other = LOCK_NAME.exec(name);
    if (!other || join(outDir, name) === path) continue;
    // Shards of one sharding hold disjoint slides.
    if (shard && other[2] !== undefined && Number(other[2]) === shard.count) continue;
    const holder = holderOf(join(outDir, name));
    if (stale(holder)) continue;
    release();
    throw new OutputError(
      'TILE_ERR_OUTPUT_LOCKED',
      `${outDir} is being written by another tile-infer whose slides may be this run's (${who(holder)}; ${join(outDir, name)}): a run of all the slides and a shard, or two shardings, cannot share an --out; wait for it, or use another --out`,
    );
  }
  return { path, release };
}

/** Creates `path` with `content`, failing with EEXIST when it exists. Created empty and then
 *  written (O_EXCL), a lock was read empty by a run started beside it on a busy machine, which
 *  could then not say who held it; a hard link appears with its content. Where the file system has
 *  no hard links, O_EXCL it is. */
function create(path: string, content: string): void {
  const written = `${path}.${process.pid}.tmp`;
  writeFileSync(written, content);
  try {
    linkSync(written, path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
    writeFileSync(path, content, { flag: 'wx' });
  } finally {
    rmSync(written, { force: true });
  }
}
