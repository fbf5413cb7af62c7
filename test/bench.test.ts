// The benchmark's own arithmetic: a round that measured nothing (NaN) must not be reported as the
// median of its rounds.
import t from 'tap';
import { median, medianOf } from '../bench/stats.js';

t.test('median leaves NaN out; with none measured it is NaN', async (t) => {
  t.equal(median([0.8, Number.NaN, 0.7]), 0.8, 'the upper middle of the two measured');
  t.equal(median([Number.NaN, 0.9, 0.7, 0.8]), 0.8);
  t.equal(median([3, 1, 2]), 2);
  t.ok(Number.isNaN(median([Number.NaN, Number.NaN])));
  t.ok(Number.isNaN(median([])));
});

t.test('medianOf picks the round holding the median, never a NaN round', async (t) => {
  const rounds = [
    { ratio: Number.NaN, n: 1 },
    { ratio: 0.9, n: 2 },
    { ratio: 0.7, n: 3 },
    { ratio: 0.8, n: 4 },
  ];
  t.equal(medianOf(rounds, (r) => r.ratio)?.n, 4);
  t.equal(
    medianOf([{ ratio: Number.NaN }], (r) => r.ratio),
    undefined,
  );
});
