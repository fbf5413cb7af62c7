import type { Manifest } from '../../src/model-package/manifest.js';
import type { SerializedModel } from './onnx-graph.js';

/** A model package as built in memory: what `npm run models:build` writes to models/<name>/. */
export interface PackageBuild {
  manifest: Manifest;
  model: SerializedModel;
}
