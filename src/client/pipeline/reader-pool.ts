// The reader pool: worker threads (piscina), one per core, that decode slides' tiles and write
// their request bodies (reader-worker.ts), shared by every slide in flight.
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import type { Bodies, BodiesTask, DecodeTask } from './reader-worker.js';

/** Band buffers kept for reuse: a fresh 1.5 MB SharedArrayBuffer costs more CPU (zeroed,
 *  page-faulted in) than decoding the JPEG tiles into it. */
const SPARE_BANDS = 64;
/** Body buffers kept for reuse: a fresh 200 KB one per tile is page faults in the thread that
 *  writes it and external memory that makes V8 collect in the one that posts it. */
const SPARE_BODIES = 256;

export class ReaderPool {
  /** Started by the first task: a run whose slides are all skipped or refused starts no thread.
   *  Twice in this stop's e2e tier such a run (every slide finished before, or refused) died
   *  with "FATAL ERROR: Error::ThrowAsJavaScriptException napi_throw" while koffi's addon was
   *  being registered: threads that load it at start, stopped by close() a moment after they were
   *  made, are the likely cause (not reproduced alone). */
  private started: Piscina | null = null;
  private readonly spare = new Map<number, SharedArrayBuffer[]>();
  private readonly spareBodies: ArrayBuffer[] = [];
  /** Tasks not yet settled: close() waits for them. A slide that fails (a tile answered by
   *  another model version) leaves its bodies tasks running; destroyed under them, piscina met
   *  their results as "Unexpected message from Worker", an 'error' event that stopped tile-infer. */
  private readonly running = new Set<Promise<unknown>>();

  /** `env`: the threads' environment (TILE_INFER_TURBOJPEG=0 decodes JPEG tiles with libvips). */
  constructor(
    readonly threads = availableParallelism(),
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {}

  private get pool(): Piscina {
    this.started ??= new Piscina({
      filename: new URL('./reader-worker.js', import.meta.url).href,
      minThreads: this.threads,
      maxThreads: this.threads,
      idleTimeout: 60_000,
      env: this.env,
    });
    return this.started;
  }

  decode(task: DecodeTask): Promise<void> {
    return this.track(this.pool.run(task, { name: 'decode' }));
  }

  /** The bodies of a task's tiles, written into body buffers given back before when there are. */
  bodies(task: Omit<BodiesTask, 'spare'>): Promise<Bodies> {
    const spare = this.spareBodies.splice(0, task.tiles.length);
    return this.track(this.pool.run({ ...task, spare }, { name: 'bodies', transferList: spare }));
  }

  private track<T>(task: Promise<T>): Promise<T> {
    this.running.add(task);
    const settled = () => this.running.delete(task);
    task.then(settled, settled);
    return task;
  }

  /** Gives a body buffer back once its request is done with it. */
  releaseBody(body: Buffer): void {
    if (body.byteOffset === 0 && this.spareBodies.length < SPARE_BODIES)
      this.spareBodies.push(body.buffer as ArrayBuffer);
  }

  /** A band buffer of `bytes`, reused when one is free. */
  bandBuffer(bytes: number): SharedArrayBuffer {
    return this.spare.get(bytes)?.pop() ?? new SharedArrayBuffer(bytes);
  }

  /** Gives a band buffer back once no task reads it. */
  releaseBand(buffer: SharedArrayBuffer): void {
    const list = this.spare.get(buffer.byteLength) ?? [];
    this.spare.set(buffer.byteLength, list);
    if ([...this.spare.values()].reduce((n, l) => n + l.length, 0) < SPARE_BANDS) list.push(buffer);
  }

  /** Stops the threads once the tasks given them have settled (each takes milliseconds). */
  async close(): Promise<void> {
    await Promise.allSettled(this.running);
    await this.started?.destroy();
  }
}
