// Results written as they arrive: one JSON line per tile, appended with a write(2) each, so a
// kill -9 loses at most the line being written. The first line names the plan; a journal for
// another plan (model, grid) is started afresh. A torn last line is cut off before appending.
import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';

export interface TileResult {
  idx: number;
  output: number[];
  embedding?: number[] | null;
}

export class Journal {
  private constructor(
    private readonly fd: number,
    readonly done: Map<number, TileResult>,
  ) {}

  static open(path: string, plan: Record<string, unknown>): Journal {
    const header = JSON.stringify({ plan });
    const done = new Map<number, TileResult>();
    let keep = 0;
    if (existsSync(path)) {
      const text = readFileSync(path, 'utf8');
      const lines = text.split('\n');
      if (lines.length > 1 && lines[0] === header) {
        keep = Buffer.byteLength(header) + 1;
        // The element after the last newline is '' or a line cut short: never read.
        for (const line of lines.slice(1, -1)) {
          try {
            const r = JSON.parse(line) as TileResult;
            done.set(r.idx, r);
            keep += Buffer.byteLength(line) + 1;
          } catch {
            break; // a torn line from a kill: everything after it is dropped
          }
        }
      }
    }
    const fd = openSync(path, keep ? 'r+' : 'w');
    ftruncateSync(fd, keep);
    if (!keep) {
      done.clear();
      writeSync(fd, header + '\n', 0);
    }
    const journal = new Journal(fd, done);
    journal.position = keep || Buffer.byteLength(header) + 1;
    return journal;
  }

  private position = 0;

  append(result: TileResult): void {
    const line = Buffer.from(JSON.stringify(result) + '\n');
    writeSync(this.fd, line, 0, line.length, this.position);
    this.position += line.length;
    this.done.set(result.idx, result);
  }

  close(): void {
    closeSync(this.fd);
  }
}
