// Dynamic batching, as Triton's dynamic batcher: requests gather until the model's max batch or a
// max queue delay, then one session.run serves them all. One run is in flight at a time; while it
// runs, newly decoded tiles gather for the next.
export interface BatcherOptions<T> {
  maxBatch: number;
  maxDelayMs: number;
  run: (batch: T[]) => Promise<void>;
}

export class Batcher<T> {
  private readonly queue: T[] = [];
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly options: BatcherOptions<T>) {}

  /** Largest batch; the worker lowers it when warm-up keeps only smaller shapes. */
  set maxBatch(value: number) {
    this.options.maxBatch = value;
  }

  get pending(): number {
    return this.queue.length;
  }

  push(item: T): void {
    this.queue.push(item);
    if (this.running) return;
    if (this.queue.length >= this.options.maxBatch || this.options.maxDelayMs <= 0) void this.drain();
    else this.timer ??= setTimeout(() => void this.drain(), this.options.maxDelayMs);
  }

  /** Resolves once every queued item has run. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async drain(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.running) return;
    this.running = true;
    // Items that arrived during a run have already waited: run them at once.
    while (this.queue.length > 0) await this.options.run(this.queue.splice(0, this.options.maxBatch));
    this.running = false;
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }
}
