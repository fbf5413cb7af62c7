// The models the Open Inference Protocol tests serve: the shipped three, tile-embed with
// batch.max 32 (a request may hold 32 tiles; the worker runs them padded to batches of 4 and 8),
// and a package that cannot load (its model is failed: 503 / UNAVAILABLE).
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODELS, type ModelConfig } from './server.js';
import { tempDir } from '../../tools/temp-dir.js';

function batch32(): string {
  const dir = join(tempDir('pkg'), 'tile-embed-b32');
  mkdirSync(dir);
  copyFileSync(join(MODELS, 'tile-embed', 'model.onnx'), join(dir, 'model.onnx'));
  const manifest = JSON.parse(readFileSync(join(MODELS, 'tile-embed', 'manifest.json'), 'utf8'));
  writeFileSync(
    join(dir, 'manifest.json'),
    JSON.stringify({ ...manifest, name: 'tile-embed-b32', batch: { max: 32 } }),
  );
  return dir;
}

function broken(): string {
  const dir = join(tempDir('pkg'), 'broken');
  mkdirSync(dir);
  writeFileSync(join(dir, 'manifest.json'), '{');
  return dir;
}

/** Serve with health.strict_readiness false: the broken model must not hold readiness. */
export const V2_MODELS = (): ModelConfig[] => [
  { name: 'tissue-seg', gpus: [] },
  { name: 'gene-expr', gpus: [] },
  { name: 'tile-embed', gpus: [] },
  { name: 'tile-embed-b32', path: batch32(), gpus: [], max_batch: 8, batch_shapes: [4, 8], intra_op_threads: 1 },
  { name: 'broken', path: broken(), gpus: [] },
];
