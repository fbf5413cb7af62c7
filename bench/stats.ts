// The bench sections' shared statistics.

/** The middle of `xs` (the upper middle for an even count), NaN left out (a round that measured
 *  nothing: sorting with it would put any value in the middle); NaN for none. */
export const median = (xs: number[]) => medianOf(xs, (x) => x) ?? NaN;

/** The item whose `value` is the median of the items' values, NaN left out; undefined for none. */
export function medianOf<T>(items: readonly T[], value: (item: T) => number): T | undefined {
  const measured = items.filter((item) => !Number.isNaN(value(item))).sort((a, b) => value(a) - value(b));
  return measured[Math.floor(measured.length / 2)];
}

/** Median milliseconds of `fn` over `n` runs. */
export function medianMs(fn: () => unknown, n = 30): number {
  return median(
    Array.from({ length: n }, () => {
      const t = performance.now();
      fn();
      return performance.now() - t;
    }),
  );
}
