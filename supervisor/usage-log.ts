// The model-request usage log: one JSON line per request in <data_dir>/usage.jsonl, rotated by
// size to usage.jsonl.1, so it survives restarts. Slide names are never recorded. Writing is
// buffered and asynchronous; a failing disk is logged, never felt by the request.
import { createWriteStream, mkdirSync, readFileSync, renameSync, statSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { ShedOutcome, UsageEntry } from '../src/ipc/protocol.js';

export interface UsageLogOptions {
  dir: string;
  maxFileBytes: number;
  recentEntries: number;
  logger: Logger;
}

export class UsageLog {
  readonly file: string;
  private stream: WriteStream | null = null;
  private size = 0;
  private readonly recentEntries: UsageEntry[] = [];
  private readonly counts = new Map<string, number>();

  constructor(private readonly options: UsageLogOptions) {
    this.file = join(options.dir, 'usage.jsonl');
    try {
      mkdirSync(options.dir, { recursive: true });
      this.size = statSync(this.file, { throwIfNoEntry: false })?.size ?? 0;
      this.loadRecent();
      this.open();
    } catch (err) {
      options.logger.error({ err }, 'usage log unavailable; requests are served but not recorded');
    }
  }

  /** A front's batch of entries, written in one piece (two when the file rotates within it). */
  record(entries: UsageEntry[]): void {
    let lines = '';
    for (const entry of entries) {
      this.recentEntries.push(entry);
      const key = `${entry.model} ${entry.endpoint} ${entry.status} ${entry.shed ?? ''}`;
      this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
      if (!this.stream) continue;
      const line = JSON.stringify(entry) + '\n';
      if (this.size + line.length > this.options.maxFileBytes) {
        if (lines) this.stream.write(lines);
        lines = '';
        this.rotate();
      }
      lines += line;
      this.size += line.length;
    }
    if (this.recentEntries.length > this.options.recentEntries)
      this.recentEntries.splice(0, this.recentEntries.length - this.options.recentEntries);
    if (lines) this.stream?.write(lines);
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

  private open(): void {
    this.stream = createWriteStream(this.file, { flags: 'a' });
    this.stream.on('error', (err) => {
      this.options.logger.error({ err }, 'usage log write failed; recording stops');
      this.stream = null;
    });
  }

  private rotate(): void {
    try {
      this.stream?.end();
      renameSync(this.file, `${this.file}.1`);
      this.size = 0;
      this.open();
    } catch (err) {
      this.options.logger.error({ err }, 'usage log rotation failed');
    }
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
    return readFileSync(file, 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
}
