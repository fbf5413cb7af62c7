// Bulk RNA counts as the model gets them: log1p of counts per 10,000 for any counts a request may
// hold, however large or small.
import t from 'tap';
import { writeBulk } from '../../src/worker/bulk.js';

const written = (counts: number[], transform: 'none' | 'log1p' | 'log1p_cp10k' = 'log1p_cp10k') => {
  const out = new Float32Array(counts.length + 1);
  writeBulk(counts, transform, out, 1);
  return [...out.subarray(1)];
};

/** Equal as float32 values, or a float32 step apart (the scaled arithmetic rounds differently). */
const close = (a: number[], b: number[]) =>
  a.length === b.length && a.every((v, i) => Math.abs(v - b[i]) <= 1e-6 * b[i]);

t.test('counts per 10,000 do not depend on the counts scale, up to a double range ends', async (t) => {
  const expected = written([2, 3]);
  t.same(expected, [Math.fround(Math.log1p(4000)), Math.fround(Math.log1p(6000))], 'ordinary counts');
  t.ok(close(written([1e308, 1.5e308]), expected), 'counts whose sum is past a double (Infinity)');
  t.ok(close(written([1e-323, 1.5e-323]), expected), 'counts so small that 10,000 over their sum is Infinity');
  t.same(written([0, 0]), [0, 0], 'zero counts stay zeros');
  t.same(written([2, 0], 'log1p'), [Math.fround(Math.log1p(2)), 0], 'log1p');
  t.same(written([2, 0], 'none'), [2, 0], 'none');
});
