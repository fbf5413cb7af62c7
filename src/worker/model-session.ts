// The worker's model session as seen from its main thread: the session itself lives on a
// thread of its own (session-thread.ts); this side checks the manifest against the graph and
// sends batches over, handing their buffers across without a copy.
import threads, { Worker } from 'node:worker_threads';
import type ort from 'onnxruntime-node';
import {
  checkSignature,
  type ModelPackage,
  type ServingPlan,
  type SessionSignature,
} from '../model-package/model-package.js';
import type { WorkerConfig } from '../ipc/fork-config.js';
import type { SessionThreadData, ThreadReply, ThreadRequest, WireTensor } from './session-thread.js';
import { RequestReply } from '../ipc/request-reply.js';
import { CodedError } from '../lib/errors.js';
import { ExitCode } from '../lib/exit-codes.js';
import { NoProviderError, type ProviderChoice } from './providers.js';

const THREAD_ENTRY = new URL('./session-thread.js', import.meta.url);

/** From Node 22 a native addon's memory (@napi-rs/image's decoded pixels, which a single uint8
 *  RGB tile hands to the session as they are) is marked untransferable, and postMessage refuses
 *  the whole message. Node 20 transfers it and has no isMarkedAsUntransferable. */
const untransferable = (buffer: ArrayBuffer) => threads.isMarkedAsUntransferable?.(buffer) ?? false;

/** Whether the tensor's data is a buffer it has to itself that may leave this thread. */
const ownBuffer = (view: ArrayBufferView) =>
  view.byteOffset === 0 &&
  view.byteLength === view.buffer.byteLength &&
  view.buffer instanceof ArrayBuffer &&
  !untransferable(view.buffer);

/** A copy of a typed array's bytes in a buffer of its own, of the same element type (a Buffer,
 *  whose slice() is a view, becomes a Uint8Array). */
function ownCopy(view: ArrayBufferView): ArrayBufferView {
  const bytes = new Uint8Array(view.byteLength);
  bytes.set(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
  if (view instanceof Uint8Array) return bytes;
  return new (view.constructor as new (buffer: ArrayBuffer) => ArrayBufferView)(bytes.buffer);
}

/** The feeds as they cross to the session thread, and the buffers handed over with them. Data
 *  that is part of a larger buffer (a tile of an Open Inference Protocol batch is a view into its
 *  IPC frame) is copied out first: postMessage clones a view's whole buffer, 4.8 MB for each tile
 *  of a batch of 32 (5 ms against 0.6 for the tile alone). */
export function toWire(feeds: Record<string, ort.Tensor>): {
  wire: Record<string, WireTensor>;
  transfer: ArrayBuffer[];
} {
  const wire: Record<string, WireTensor> = {};
  const transfer: ArrayBuffer[] = [];
  for (const [name, t] of Object.entries(feeds)) {
    const view = t.data as ArrayBufferView;
    const data = ownBuffer(view) ? view : ownCopy(view);
    wire[name] = { type: t.type, data: data as ort.Tensor.DataType, dims: t.dims };
    transfer.push(data.buffer as ArrayBuffer);
  }
  return { wire, transfer };
}

export class ModelSession {
  private readonly runs = new RequestReply<Record<string, WireTensor>>();
  /** One spare input buffer per size: a batch's buffers come back with its outputs, and the next
   *  batch of that size is written into them. A fresh one costs a page fault every 4 KiB while it
   *  is filled: a float32 batch of 32 tiles of 224 px (19 MB) took 24 ms to fill fresh against
   *  3.6 ms reused, uint8 4.9 ms against 0.05 (this VM, Node 22). One is enough: the worker runs
   *  one batch at a time and prepares at most the next during it (batcher.ts), by when the
   *  buffers of the one before are back. */
  private readonly spare = new Map<number, ArrayBuffer>();

  private constructor(
    private readonly thread: Worker,
    readonly signature: SessionSignature,
    /** How the manifest maps onto this graph (checkSignature). */
    readonly plan: ServingPlan,
    /** The provider it runs on, those passed over and why, the Vulkan device for webgpu. */
    readonly choice: ProviderChoice,
    /** Milliseconds to create the session (provider checks included). */
    readonly sessionMs: number,
  ) {
    thread.on('message', (message: ThreadReply) => {
      if ('inputs' in message) for (const b of message.inputs) this.recycle(b);
      if (message.type === 'result') this.runs.settle(message.id, message.outputs);
      else if (message.type === 'failed') this.runs.settle(message.id, new Error(message.reason));
    });
    // The session thread dying takes the model with it: let the supervisor restart us.
    thread.on('error', (err) => {
      console.error(`session thread failed: ${err.stack}`);
      process.exit(ExitCode.SESSION_THREAD);
    });
  }

  /** Loads the package's graph on a session thread and checks it against the manifest. */
  static async open(
    pkg: ModelPackage,
    config: Pick<WorkerConfig, 'intraOpThreads' | 'provider' | 'gpu' | 'gpuPci' | 'gpuUuid'>,
  ): Promise<ModelSession> {
    const { intraOpThreads, provider, gpu, gpuPci, gpuUuid } = config;
    const data: SessionThreadData = { modelPath: pkg.modelPath, intraOpThreads, provider, gpu, gpuPci, gpuUuid };
    const thread = new Worker(THREAD_ENTRY, { workerData: data });
    const ready = await new Promise<ThreadReply>((resolve, reject) => {
      thread.once('message', resolve);
      thread.once('error', reject);
    });
    if (ready.type === 'load-failed') {
      await thread.terminate();
      throw ready.noProvider ? new NoProviderError(ready.reason) : new CodedError('TILE_ERR_MODEL_LOAD', ready.reason);
    }
    if (ready.type !== 'ready') throw new Error(`session thread sent ${ready.type} before ready`);
    let plan: ServingPlan;
    try {
      plan = checkSignature(pkg, ready);
    } catch (err) {
      await thread.terminate();
      throw err;
    }
    return new ModelSession(
      thread,
      ready,
      plan,
      { provider: ready.provider, skipped: ready.skipped, adapter: ready.adapter },
      ready.sessionMs,
    );
  }

  /** Ends the session thread (the packaging lint; a worker process just exits). */
  close(): Promise<number> {
    return this.thread.terminate();
  }

  /** A buffer of `bytes` for a batch's input: a spare one back from an earlier run, else new. Its
   *  contents are an earlier batch's: the caller writes every byte. */
  buffer(bytes: number): ArrayBuffer {
    const spare = this.spare.get(bytes);
    this.spare.delete(bytes);
    return spare ?? new ArrayBuffer(bytes);
  }

  /** Keeps a batch's input buffer for the next batch of its size: one its run gave back, or one
   *  of a batch prepared and then formed again. */
  recycle(buffer: ArrayBuffer): void {
    if (!this.spare.has(buffer.byteLength)) this.spare.set(buffer.byteLength, buffer);
  }

  run(feeds: Record<string, ort.Tensor>): Promise<Record<string, WireTensor>> {
    const { wire, transfer } = toWire(feeds);
    // No timer: a session.run that never returns is the supervisor's heartbeat to catch.
    return this.runs.request((id) => this.thread.postMessage({ id, feeds: wire } satisfies ThreadRequest, transfer));
  }
}
