// Warm-up: before a worker reports ready it runs every candidate batch shape (a misfit output
// refuses the package there, not on a request; compiling providers compile each shape) and
// checks which shapes give a tile the same bytes as the reference, so that a tile's outputs do
// not depend on its batch (batch-shapes.ts decides from these checks).
import type { ProviderName } from '../config/config.js';
import type { ShapeCheck, WarmupReport } from '../ipc/protocol.js';
import type { Manifest } from '../model-package/manifest.js';
import type { Pixels } from '../tile/png.js';
import { type BatchShapesSetting, candidateShapes, servedShapes } from './batch-shapes.js';
import { numbersOf, rowOf } from './outputs.js';
import type { WireTensor } from './session-thread.js';

/** The warm-up's probe tile; the tiles around it in the neighbour check follow it. */
const PROBE_SEED = 7;

const noise = new Map<string, Uint8Array>();

/** A synthetic tile of seeded noise (mulberry32), so that kernels taking another path show; a
 *  fresh copy each time, since a tile's buffer may be handed to the session thread. */
function noiseTile(width: number, height: number, seed: number): Pixels {
  const key = `${width}x${height}:${seed}`;
  let data = noise.get(key);
  if (!data) {
    data = new Uint8Array(width * height * 3);
    let a = seed >>> 0;
    for (let i = 0; i < data.length; i++) {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = Math.imul(a ^ (a >>> 15), a | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      data[i] = (t ^ (t >>> 14)) >>> 24;
    }
    noise.set(key, data);
  }
  return { width, height, channels: 3, data: data.slice() };
}

/** Row i of each output tensor, as bytes. */
const rowBytes = (outputs: Record<string, WireTensor>, names: string[], i: number) =>
  names.map((name) => {
    const view = outputs[name].data as ArrayBufferView;
    const per = view.byteLength / outputs[name].dims[0];
    return new Uint8Array(view.buffer, view.byteOffset + i * per, per);
  });

const sameBytes = (a: Uint8Array[], b: Uint8Array[]) => a.every((x, k) => Buffer.compare(x, b[k]) === 0);

/** How row `row` of `outputs` differs from the reference's first row:
 *  "embedding: 147 of 160 values differ, by up to 1.9e-7". */
function difference(
  outputs: Record<string, WireTensor>,
  row: number,
  reference: Record<string, WireTensor>,
  names: string[],
): string {
  return names
    .map((name) => {
      const expected = rowOf(numbersOf(reference[name]), reference[name].dims[0], 0);
      const got = rowOf(numbersOf(outputs[name]), outputs[name].dims[0], row);
      let count = 0;
      let most = 0;
      got.forEach((v, k) => {
        if (Object.is(v, expected[k])) return;
        count++;
        most = Math.max(most, Math.abs(v - expected[k]));
      });
      return count ? `${name}: ${count} of ${expected.length} values differ, by up to ${most.toPrecision(2)}` : '';
    })
    .filter(Boolean)
    .join('; ');
}

export interface WarmupOptions {
  manifest: Manifest;
  provider: ProviderName;
  batchShapes: BatchShapesSetting;
  /** The largest batch the graph and the configuration allow. */
  maxBatch: number;
  /** Runs of each shape (at least one). */
  iterations: number;
  /** One forward pass of these tiles as one batch (the worker's own, outputs checked). */
  forward: (tiles: Pixels[]) => Promise<Record<string, WireTensor>>;
}

/**
 * Runs every candidate batch shape `iterations` times, as a batch of one probe tile in every row,
 * and keeps the shapes whose every row is byte for byte the reference (the largest shape's first
 * row). At the largest shape it also runs the probe between other tiles (do tiles of a batch
 * change each other's outputs?) and, on GPU providers, twice (is the provider deterministic?).
 */
export async function warmUp(options: WarmupOptions): Promise<WarmupReport> {
  const { manifest, provider, batchShapes, maxBatch, iterations, forward } = options;
  const { width, height } = manifest.tile;
  const names = (['mask', 'prediction', 'embedding'] as const)
    .map((role) => manifest.tensors[role])
    .filter((n): n is string => !!n);
  const candidates = candidateShapes(batchShapes, provider, maxBatch);
  const largest = candidates[candidates.length - 1];
  const run = (seeds: number[]) => forward(seeds.map((seed) => noiseTile(width, height, seed)));
  const probe = (size: number) => run(Array(size).fill(PROBE_SEED));
  const rows = (outputs: Record<string, WireTensor>, size: number) =>
    Array.from({ length: size }, (_, i) => rowBytes(outputs, names, i));
  const results = new Map<number, { rows: Uint8Array[][]; outputs: Record<string, WireTensor>; ms: number }>();
  for (const size of candidates) {
    const started = performance.now();
    let outputs = await probe(size);
    const ms = performance.now() - started;
    for (let i = 1; i < iterations; i++) outputs = await probe(size);
    results.set(size, { rows: rows(outputs, size), outputs, ms });
  }
  const reference = results.get(largest)!;
  const expected = reference.rows[0];
  const mismatch = (got: Uint8Array[][]) => got.findIndex((row) => !sameBytes(row, expected));
  let neighbours = false;
  let deterministic = true;
  if (largest > 1) {
    // The probe first and last, other tiles between.
    const mixed = await run(
      Array.from({ length: largest }, (_, i) => (i === 0 || i === largest - 1 ? PROBE_SEED : PROBE_SEED + 1 + i)),
    );
    const got = rows(mixed, largest);
    neighbours = !sameBytes(got[0], reference.rows[0]) || !sameBytes(got[largest - 1], reference.rows[largest - 1]);
  }
  // ONNX Runtime's cpu kernels give one answer per shape and row; a GPU library may not (atomics).
  if (provider !== 'cpu')
    deterministic = rows(await probe(largest), largest).every((row, i) => sameBytes(row, reference.rows[i]));
  const checks: ShapeCheck[] = candidates.map((size) => {
    const { rows: got, outputs, ms } = results.get(size)!;
    const row = mismatch(got);
    return {
      batch: size,
      ms: Math.round(ms),
      identical: row < 0,
      ...(row >= 0 && { difference: `row ${row}: ${difference(outputs, row, reference.outputs, names)}` }),
    };
  });
  const note = !deterministic
    ? `${provider} gave the batch of ${largest} two different answers: outputs are not reproducible on it`
    : neighbours
      ? 'a tile changed the outputs of the other tiles of its batch (the graph mixes the batch): batches of one only'
      : null;
  return {
    shapes: servedShapes(batchShapes, checks, deterministic, neighbours, maxBatch),
    checks,
    deterministic,
    batchIndependent: batchShapes !== 'any' && deterministic,
    note,
  };
}
