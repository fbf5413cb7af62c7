// onnxruntime-node as every process here loads it (a worker and its session thread, the
// supervisor's provider probes, the bench's floor, the package tool): with its telemetry off
// (onnxruntime-telemetry.ts, imported first so that it runs first), and float16 tensors as below.
// float16 tensors carry their bit patterns in a Uint16Array (float16.ts) on every Node. Where the
// Float16Array global exists (Node 24), onnxruntime-common would make every float16 tensor's data
// a Float16Array, whose byte length onnxruntime-node 1.30's binding reads as 0 ("not enough space:
// expected N, got 0"; microsoft/onnxruntime PR 32323), and outputs would be read as numbers where
// float16.ts expects bits. onnxruntime-common looks for the global once, at the first tensor: that
// tensor is made here, with the global hidden.
import './onnxruntime-telemetry.js';
import ort from 'onnxruntime-node';

const scope = globalThis as { Float16Array?: unknown };
if (scope.Float16Array !== undefined) {
  const float16Array = scope.Float16Array;
  scope.Float16Array = undefined;
  try {
    new ort.Tensor('float32', new Float32Array(0), [0]);
  } finally {
    scope.Float16Array = float16Array;
  }
}

export default ort;
