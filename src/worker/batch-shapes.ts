// Batch shapes: the batch sizes a worker runs. Kernels are chosen per input shape (ONNX Runtime's
// cpu kernels by batch size and row, cuDNN and WebGPU compile per shape), so the same tile can
// come out a few ulps different alone and inside a batch. Every batch is padded up to a shape
// whose every row the warm-up found identical, byte for byte, to the reference: a tile's outputs
// then do not depend on what else is in its batch, nor on where.
import type { ModelEntry, ProviderName } from '../config/config.js';
import type { ShapeCheck } from '../ipc/protocol.js';
import { MAX_BATCH } from '../lib/batch-bound.js';

export type BatchShapesSetting = ModelEntry['batch_shapes'];

/** Every batch size 1..maxBatch. maxBatch is at most the manifest's batch.max, which the schema
 *  bounds: a larger one is refused here rather than materialised (1e9 entries ran the worker out
 *  of heap at every load, and it died without saying why). */
export function everyBatchSize(maxBatch: number): number[] {
  if (!(maxBatch <= MAX_BATCH))
    throw new RangeError(`largest batch ${maxBatch} is over ${MAX_BATCH} (batch.max's bound)`);
  return Array.from({ length: Math.max(0, maxBatch) }, (_, i) => i + 1);
}

/**
 * The sizes warm-up runs, ascending; the last is the reference the others are compared with.
 * "auto" gives one shape, so that a tile's outputs cannot depend on the batch by construction:
 * - cpu: a batch of one. ONNX Runtime's cpu kernels take other paths by batch size and by a
 *   row's place in the batch (the same tile as row 0 and as row 2 of a batch of three differed
 *   in one of gene-expr's 21 predictions), and its kernels parallelize within a tile, so one
 *   tile per run costs it little.
 * - GPU providers: the largest batch, every batch padded to it. They compile per shape and may
 *   pick other kernels by shape (a tile alone and in a batch of two differed on WebGPU), while a
 *   batch of any size costs them about the same.
 * A list runs and checks each of its sizes; which of them agree is found on probe tiles, so it
 * is as sure as those tiles show kernel differences (on WebGPU one tile showed that difference
 * and a noise tile did not). "any" pads nothing; GPU providers compile every size at load.
 */
export function candidateShapes(setting: BatchShapesSetting, provider: ProviderName, maxBatch: number): number[] {
  if (Array.isArray(setting)) {
    const listed = [...new Set(setting.filter((s) => s <= maxBatch))].sort((a, b) => a - b);
    return listed.length ? listed : [maxBatch];
  }
  if (provider === 'cpu') return [1];
  return setting === 'any' ? everyBatchSize(maxBatch) : [maxBatch];
}

/**
 * The sizes batches are padded up to, from the warm-up's checks (in candidateShapes' order); the
 * last is the largest batch the worker forms. A shape is kept when every row of a batch of the
 * probe tile was byte for byte the reference. "any": every size, no padding. When the provider
 * gave the reference two answers in two runs (`deterministic` false) the checks meant nothing and
 * every candidate is kept; when a tile's outputs changed with the other tiles of its batch
 * (`neighbours` true: the graph mixes the batch) only a batch of one is independent.
 */
export function servedShapes(
  setting: BatchShapesSetting,
  checks: ShapeCheck[],
  deterministic: boolean,
  neighbours: boolean,
  maxBatch: number,
): number[] {
  if (setting === 'any') return everyBatchSize(maxBatch);
  if (!deterministic) return checks.map((c) => c.batch);
  const identical = checks.filter((c) => c.identical).map((c) => c.batch);
  return neighbours || identical.length === 0 ? [1] : identical;
}

/** The shape a batch of n runs as. */
export const padTo = (shapes: readonly number[], n: number): number =>
  shapes.find((s) => s >= n) ?? shapes[shapes.length - 1];
