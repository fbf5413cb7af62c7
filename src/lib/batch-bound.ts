/** The largest batch a manifest's batch.max or the config's max_batch and batch_shapes may name.
 *  Real batches stay in the hundreds (max_queue defaults to 64 requests); the worker keeps one
 *  entry per batch size (batch_shapes "any"), so an unbounded max (1e9) ran it out of heap at
 *  every load (an attack session). */
export const MAX_BATCH = 4096;
