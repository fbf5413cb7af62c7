// ONNX Runtime 1.29 and later send telemetry to Microsoft from Linux by default (1DS): a device
// id kept under $XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime, beside a queue of events
// naming each model's file, graph, producer and metadata, the host's hardware and OS, and the
// Node binary's path, uploaded whenever the host reaches the collector. Slides' models and hosts
// stay in house: every process here loads ONNX Runtime through onnxruntime.ts, which imports this
// module first, so the opt-out is in the environment before the runtime reads it. Both names are
// set: ORT_DISABLE_TELEMETRY is what 1.30 reads, ORT_TELEMETRY_DISABLED what later releases read.
// (Without it ONNX Runtime also leaves an empty mat-debug-<pid>.log in $TMPDIR per process.) An
// operator's own non-empty value under either name is kept and given to both: 0 lets ONNX Runtime
// send it. It counts on a process's main thread only (a worker thread's process.env is a copy
// that native code never reads): a model worker's main thread imports onnxruntime.ts before it
// starts the session thread.
const NAMES = ['ORT_DISABLE_TELEMETRY', 'ORT_TELEMETRY_DISABLED'];
const value = NAMES.map((name) => process.env[name]).find(Boolean) ?? '1';
/** The names set here rather than by the operator: a tool starting another checkout's service
 *  leaves them out of its environment, so that checkout runs as it would on its own. */
export const SET_HERE = NAMES.filter((name) => !process.env[name]);
for (const name of SET_HERE) process.env[name] = value;
