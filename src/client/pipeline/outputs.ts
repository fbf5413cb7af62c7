// The files a slide leaves behind. Each is written to a temporary name and renamed, so a kill
// never leaves a half-written output, and the same results always give the same bytes.
import { renameSync, writeFileSync } from 'node:fs';
import h5wasm from 'h5wasm/node';

/** Writes `path` through a temporary file in the same folder. */
export function writeAtomic(path: string, write: (tmp: string) => void): void {
  const tmp = `${path}.tmp-${process.pid}`;
  write(tmp);
  renameSync(tmp, path);
}

export const writeFileAtomic = (path: string, data: string | Uint8Array) => writeAtomic(path, (tmp) => writeFileSync(tmp, data));

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
  await h5wasm.ready;
  writeAtomic(path, (tmp) => {
    const now = Date.now;
    Date.now = () => 0;
    try {
      const file = new h5wasm.File(tmp, 'w');
      for (const d of datasets) {
        const dtype = d.data instanceof Float32Array ? '<f' : d.data instanceof Int32Array ? '<i' : undefined;
        const dataset = file.create_dataset({ name: d.name, data: d.data, shape: d.shape, dtype });
        for (const [k, v] of Object.entries(d.attrs ?? {})) dataset.create_attribute(k, v);
      }
      for (const [k, v] of Object.entries(attrs)) file.create_attribute(k, v);
      file.close();
    } finally {
      Date.now = now;
    }
  });
}

/** Shortest decimal that reads back as the same float32. */
export const float32Text = (v: number) => String(parseFloat(Math.fround(v).toPrecision(9)));

export function predictionsCsv(genes: string[], rows: { idx: number; x: number; y: number; values: ArrayLike<number> }[]): string {
  const lines = [['patch_idx', 'x', 'y', ...genes].join(',')];
  for (const r of rows) lines.push([r.idx, r.x, r.y, ...Array.from(r.values, float32Text)].join(','));
  return lines.join('\n') + '\n';
}
