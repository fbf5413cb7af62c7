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
  if (transform === 'log1p_cp10k') {
    const total = counts.reduce((s, v) => s + v, 0);
    factor = total > 0 ? 1e4 / total : 0;
  }
  for (let i = 0; i < counts.length; i++) {
    out[offset + i] = transform === 'none' ? counts[i] : Math.log1p(Math.max(counts[i] * factor, 0));
  }
}
