// The bench sections' shared statistics.

/** The middle of `xs` (the upper middle for an even count); NaN for none. */
export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

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
