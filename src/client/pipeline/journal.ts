// Results written as they arrive: one JSON line per tile, appended with a write(2) each, so a
// kill -9 loses at most the line being written. The first line names the plan; a journal for
// another plan (model, grid) is started afresh. A torn last line is cut off before appending;
// any other line is checked (a tile of the plan, once, values that are finite float32 of the
// model's lengths) and a bad one fails the slide rather than go into its outputs.
import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { OutputError, writeFailed } from './outputs.js';

export interface TileResult {
  idx: number;
  output: number[];
  embedding?: number[] | null;
}

/** What a line must hold: `tiles` tiles (idx 0 to tiles-1), and the lengths of the model's
 *  vectors where the model says them. */
export interface JournalShape {
  tiles: number;
  /** Whether each result holds an embedding beside its output (a prediction asked for with the
   *  embedding of its forward pass). */
  withEmbedding?: boolean;
  output?: number;
  embedding?: number;
}

const FLOAT32_MAX = 3.4028234663852886e38;

/** Why a result cannot be kept, or null. */
function problem(r: TileResult, shape: JournalShape): string | null {
  if (!Number.isInteger(r?.idx) || r.idx < 0 || r.idx >= shape.tiles)
    return `tile index ${JSON.stringify(r?.idx)} is not one of the ${shape.tiles} tiles`;
  for (const [name, values, length, wanted] of [
    ['output', r.output, shape.output, true],
    ['embedding', r.embedding, shape.embedding, shape.withEmbedding === true],
  ] as const) {
    // A result without its output was kept as {"idx": N}, and failed the slide on every rerun
    // (an attack session: a proxy answering 200 {}).
    if (!wanted && (values === undefined || values === null)) continue;
    if (!Array.isArray(values)) return `tile ${r.idx}: ${name} is not a list of numbers`;
    if (length !== undefined && values.length !== length)
      return `tile ${r.idx}: ${name} has ${values.length} values, the model gives ${length}`;
    const bad = values.findIndex((v) => typeof v !== 'number' || !(Math.abs(v) <= FLOAT32_MAX));
    if (bad >= 0) return `tile ${r.idx}: ${name}[${bad}] is ${values[bad]}, not a finite float32`;
  }
  return null;
}

export class Journal {
  private constructor(
    private readonly fd: number,
    readonly done: Map<number, TileResult>,
    private readonly shape: JournalShape,
    private readonly path: string,
  ) {}

  static open(path: string, plan: Record<string, unknown>, given: JournalShape): Journal {
    // Lengths the model does not state are the first result's, for every other result.
    const shape = { ...given };
    const header = JSON.stringify({ plan });
    const done = new Map<number, TileResult>();
    let keep = 0;
    if (existsSync(path)) {
      const text = readFileSync(path, 'utf8');
      const lines = text.split('\n');
      if (lines.length > 1 && lines[0] === header) {
        keep = Buffer.byteLength(header) + 1;
        // The element after the last newline is '' or a line cut short: never read.
        for (const [k, line] of lines.slice(1, -1).entries()) {
          let r: TileResult;
          try {
            r = JSON.parse(line) as TileResult;
          } catch {
            break; // a torn line from a kill: everything after it is dropped
          }
          const why = problem(r, shape) ?? (done.has(r.idx) ? `tile ${r.idx} is there twice` : null);
          if (why)
            throw new OutputError(
              'TILE_ERR_OUTPUT_JOURNAL',
              `${path}: line ${k + 2}: ${why}; delete the file to redo the slide`,
            );
          shape.output ??= r.output.length;
          if (r.embedding) shape.embedding ??= r.embedding.length;
          done.set(r.idx, r);
          keep += Buffer.byteLength(line) + 1;
        }
      }
    }
    let fd: number;
    try {
      fd = openSync(path, keep ? 'r+' : 'w');
      ftruncateSync(fd, keep);
      if (!keep) writeSync(fd, header + '\n', 0);
    } catch (err) {
      throw writeFailed(path, err);
    }
    if (!keep) done.clear();
    const journal = new Journal(fd, done, shape, path);
    journal.position = keep || Buffer.byteLength(header) + 1;
    return journal;
  }

  private position = 0;

  append(result: TileResult): void {
    const why = problem(result, this.shape);
    if (why)
      throw new OutputError('TILE_ERR_OUTPUT_JOURNAL', `${this.path}: the service's answer for ${why}; not kept`);
    const line = Buffer.from(JSON.stringify(result) + '\n');
    try {
      writeSync(this.fd, line, 0, line.length, this.position);
    } catch (err) {
      throw writeFailed(this.path, err);
    }
    this.position += line.length;
    this.done.set(result.idx, result);
    this.shape.output ??= result.output.length;
    if (result.embedding) this.shape.embedding ??= result.embedding.length;
  }

  close(): void {
    closeSync(this.fd);
  }
}
