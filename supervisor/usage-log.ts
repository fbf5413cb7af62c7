// The model-request usage log: one JSON line per request in <data_dir>/usage.jsonl, rotated by
// size to usage.jsonl.1, so it survives restarts. Slide names are never recorded. Writing is
// buffered and asynchronous; a failing disk is logged, never felt by the request. A file that
// cannot be written (the disk full, data_dir removed) is opened again by a later batch, at most
// every USAGE_RETRY_MS; the entries lost meanwhile are counted and said when recording resumes.
import { createWriteStream, mkdirSync, readFileSync, renameSync, statSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { ShedOutcome, UsageEntry } from '../src/ipc/protocol.js';
import { WriteOutage } from '../src/lib/write-outage.js';
import { readHead } from '../src/lib/read-head.js';

/** How often a usage log that cannot be written is tried again: a full disk is not tried by
 *  every request. */
export const USAGE_RETRY_MS = 5000;

export interface UsageLogOptions {
  dir: string;
  maxFileBytes: number;
  recentEntries: number;
  logger: Logger;
  /** Default USAGE_RETRY_MS. */
  retryMs?: number;
}

export class UsageLog {
  readonly file: string;
  private stream: WriteStream | null = null;
  private size = 0;
  private readonly recentEntries: UsageEntry[] = [];
  private readonly counts = new Map<string, number>();
  private readonly outage: WriteOutage;
  /** The file's last line has no end (a write cut short). */
  private torn = false;

  constructor(private readonly options: UsageLogOptions) {
    this.file = join(options.dir, 'usage.jsonl');
    const log = options.logger;
    const retryMs = options.retryMs ?? USAGE_RETRY_MS;
    this.outage = new WriteOutage(
      {
        failed: (err) =>
          log.error(
            { err, file: this.file, retryMs },
            'usage log write failed; requests are served, their entries dropped (counted) until it can be written again',
          ),
        resumed: (dropped, failedMs) => log.info({ file: this.file, dropped, failedMs }, 'usage log recording resumes'),
      },
      retryMs,
    );
    this.loadRecent();
    this.open();
  }

  /** A front's batch of entries, written in one piece (two when the file rotates within it). */
  record(entries: UsageEntry[]): void {
    for (const entry of entries) {
      this.recentEntries.push(entry);
      const key = `${entry.model} ${entry.endpoint} ${entry.status} ${entry.shed ?? ''}`;
      this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    }
    if (this.recentEntries.length > this.options.recentEntries)
      this.recentEntries.splice(0, this.recentEntries.length - this.options.recentEntries);
    if (!this.stream && !(this.outage.mayTry() && this.open())) return this.outage.drop(entries.length);
    let lines = '';
    let count = 0;
    for (const [i, entry] of entries.entries()) {
      const line = JSON.stringify(entry) + '\n';
      if (this.size + line.length > this.options.maxFileBytes) {
        this.write(lines, count);
        lines = '';
        count = 0;
        this.rotate();
        if (!this.stream) return this.outage.drop(entries.length - i);
      }
      lines += line;
      count++;
      this.size += line.length;
    }
    this.write(lines, count);
  }

  /** The most recent entries, newest last. */
  recent(): UsageEntry[] {
    return [...this.recentEntries];
  }

  /** Requests since this process started, by model, endpoint, status and how they were shed
   *  (expired, cancelled, refused). */
  summary(): { model: string; endpoint: string; status: number; shed?: ShedOutcome; count: number }[] {
    return [...this.counts].map(([key, count]) => {
      const [model, endpoint, status, shed] = key.split(' ');
      return { model, endpoint, status: Number(status), ...(shed && { shed: shed as ShedOutcome }), count };
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => (this.stream ? this.stream.end(resolve) : resolve()));
  }

  /** Opens the file for appending; false when even its folder cannot be made or read. */
  private open(): boolean {
    try {
      mkdirSync(this.options.dir, { recursive: true });
      this.size = statSync(this.file, { throwIfNoEntry: false })?.size ?? 0;
      // A line torn by a full disk (or a crash) is ended first, so the next entry stays whole.
      this.torn = this.size > 0 && readHead(this.file, 1, this.size - 1)[0] !== 0x0a;
    } catch (err) {
      this.outage.failed(err as Error);
      return false;
    }
    const stream = createWriteStream(this.file, { flags: 'a' });
    // A failed open or write: its callbacks, the failed one's and those queued after it, count
    // what was lost.
    stream.on('error', (err) => this.lost(stream, err, 0));
    this.stream = stream;
    return true;
  }

  /** `count` entries in `lines`, counted as dropped if their write fails. */
  private write(lines: string, count: number): void {
    const stream = this.stream;
    if (!stream || count === 0) return;
    if (this.torn) lines = `\n${lines}`;
    this.torn = false;
    stream.write(lines, (err) => (err ? this.lost(stream, err, count) : this.outage.worked()));
  }

  /** A write to `stream` failed: the stream is done with; a later batch opens the file again. */
  private lost(stream: WriteStream, err: Error, count: number): void {
    this.outage.drop(count);
    this.outage.failed(err);
    if (this.stream !== stream) return;
    this.stream = null;
    stream.destroy();
  }

  /** The full file becomes usage.jsonl.1 (what the old stream holds still goes to it), and a new
   *  one is started; a failed rename is a failure like a failed write. */
  private rotate(): void {
    this.stream?.end();
    this.stream = null;
    try {
      renameSync(this.file, `${this.file}.1`);
    } catch (err) {
      this.outage.failed(err as Error);
      return;
    }
    this.open();
  }

  private loadRecent(): void {
    const lines = [...readLines(`${this.file}.1`), ...readLines(this.file)].slice(-this.options.recentEntries);
    for (const line of lines) {
      try {
        this.recentEntries.push(JSON.parse(line) as UsageEntry);
      } catch {
        // a torn last line from a crash: skip it
      }
    }
  }
}

function readLines(file: string): string[] {
  try {
    // A regular file only: a device at the path (/dev/full, /dev/zero) never ends.
    if (!statSync(file).isFile()) return [];
    return readFileSync(file, 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
}
