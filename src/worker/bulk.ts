import type { BulkTransform } from '../model-package/manifest.js';

/** Writes bulk RNA counts, transformed as the manifest says, into `out`; null (omitted) is zeros. */
export function writeBulk(
  counts: readonly number[] | null,
  transform: BulkTransform,
  out: Float32Array,
  offset: number,
): void {
  if (!counts) return;
  let factor = 1;
  let scale = 1;
  if (transform === 'log1p_cp10k') {
    let total = counts.reduce((s, v) => s + v, 0);
    // Counts whose sum is past a double's range (two of 1e308) made the factor 0, the vector zeros
    // and the answer that of no bulk at all (an attack session); counts so small that 1e4 over
    // their sum is (5e-324 each) made it Infinity. Divided by the largest first, they sum to
    // between 1 and their number. Counts of any other size keep their exact arithmetic (scale 1).
    if (total > 0 && !(Number.isFinite(total) && Number.isFinite(1e4 / total))) {
      scale = counts.reduce((m, v) => Math.max(m, v), 0);
      total = counts.reduce((s, v) => s + v / scale, 0);
    }
    factor = total > 0 ? 1e4 / total : 0;
  }
  for (let i = 0; i < counts.length; i++) {
    out[offset + i] = transform === 'none' ? counts[i] : Math.log1p(Math.max((counts[i] / scale) * factor, 0));
  }
}
