// The files a slide leaves behind. Each is written to a temporary name and renamed, so a kill
// never leaves a half-written output, and the same results always give the same bytes.
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { CodedError, type CodesOf } from '../../lib/errors.js';

/** An output that cannot be written, or a journal that cannot be trusted: the path and why. */
export class OutputError extends CodedError<CodesOf<'OUTPUT'>> {
  override name = 'OutputError';
}

/** A file system error as the reason a path cannot be written: "EACCES: permission denied". */
const reasonOf = (err: unknown) => {
  const e = err as NodeJS.ErrnoException;
  return e.code && e.syscall
    ? `${e.code}: ${e.message.split(',')[0].replace(`${e.code}: `, '')}`
    : (err as Error).message;
};

export const writeFailed = (path: string, err: unknown) =>
  err instanceof OutputError ? err : new OutputError('TILE_ERR_OUTPUT_WRITE', `cannot write ${path}: ${reasonOf(err)}`);

/** mkdir -p, or an OutputError naming the folder. */
export function makeDir(path: string): void {
  try {
    mkdirSync(path, { recursive: true });
  } catch (err) {
    throw writeFailed(path, err);
  }
}

/** Writes `path` through a temporary file in the same folder, removed if the write fails. */
export function writeAtomic(path: string, write: (tmp: string) => void): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    write(tmp);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw writeFailed(path, err);
  }
}

export const writeFileAtomic = (path: string, data: string | Uint8Array) =>
  writeAtomic(path, (tmp) => writeFileSync(tmp, data));

export type H5Attrs = Record<string, string | number>;

export interface H5Dataset {
  name: string;
  data: Float32Array | Int32Array | string[];
  shape: number[];
  attrs?: H5Attrs;
}

/** An HDF5 file of datasets with attributes. HDF5 stamps every object with the wall-clock time
 *  and h5wasm does not reach H5Pset_obj_track_times; its writes are synchronous, so Date.now is
 *  pinned to 0 while they run and a rerun gives identical files. */
export async function writeH5(path: string, datasets: H5Dataset[], attrs: H5Attrs): Promise<void> {
  // Loaded with the first file written (200 ms, every tile-infer start otherwise).
  const { default: h5wasm } = await import('h5wasm/node');
  await h5wasm.ready;
  writeAtomic(path, (tmp) => {
    // Node makes the file first, so a folder that cannot take it is its errno, not HDF5's.
    writeFileSync(tmp, '');
    quietHdf5(tmp, () => {
      const now = Date.now;
      Date.now = () => 0;
      try {
        const file = new h5wasm.File(tmp, 'w');
        try {
          for (const d of datasets) {
            const dtype = d.data instanceof Float32Array ? '<f' : d.data instanceof Int32Array ? '<i' : undefined;
            const dataset = file.create_dataset({ name: d.name, data: d.data, shape: d.shape, dtype });
            for (const [k, v] of Object.entries(d.attrs ?? {})) dataset.create_attribute(k, v);
          }
          for (const [k, v] of Object.entries(attrs)) file.create_attribute(k, v);
        } finally {
          file.close();
        }
      } finally {
        Date.now = now;
      }
    });
  });
}

/** Runs synchronous h5wasm calls with HDF5's diagnostics (printed to stderr by its error stack)
 *  kept off the terminal: a failure is one OutputError naming the path and HDF5's own reason. */
function quietHdf5(path: string, run: () => void): void {
  const write = process.stderr.write;
  let said = '';
  process.stderr.write = ((chunk: string | Uint8Array) => ((said += String(chunk)), true)) as typeof write;
  try {
    run();
  } catch (err) {
    const minor = /minor: (.*)/.exec(said)?.[1];
    throw new OutputError('TILE_ERR_OUTPUT_WRITE', `cannot write ${path}: HDF5: ${minor ?? (err as Error).message}`);
  } finally {
    process.stderr.write = write;
  }
  if (said.includes('HDF5-DIAG'))
    throw new OutputError(
      'TILE_ERR_OUTPUT_WRITE',
      `cannot write ${path}: HDF5: ${/minor: (.*)/.exec(said)?.[1] ?? 'error'}`,
    );
}

/** Shortest decimal that reads back as the same float32. */
export const float32Text = (v: number) => String(parseFloat(Math.fround(v).toPrecision(9)));

/** The predictions as CSV: patch_idx, x, y, then a column per value, named `columns`. */
export function predictionsCsv(
  columns: string[],
  rows: { idx: number; x: number; y: number; values: ArrayLike<number> }[],
): string {
  const lines = [['patch_idx', 'x', 'y', ...columns].join(',')];
  for (const r of rows) lines.push([r.idx, r.x, r.y, ...Array.from(r.values, float32Text)].join(','));
  return lines.join('\n') + '\n';
}
