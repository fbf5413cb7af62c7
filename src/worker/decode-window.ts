// Tiles wait here undecoded until the batcher is about to need them (issue 27: a tile that
// expires or is cancelled is dropped before decode). Decoding every arriving tile at once would
// spend the cores on tiles nobody wants any more, and put a new tile's decode behind theirs on the
// libuv pool; only as many are decoded as keep the next batch ready.
export class DecodeWindow<T> {
  private readonly waiting: T[] = [];
  private pumping = false;

  /** `room`: how many more tiles may be decoding now; `start`: takes one out to decode (or drop). */
  constructor(private readonly options: { room: () => number; start: (item: T) => void }) {}

  get length(): number {
    return this.waiting.length;
  }

  push(item: T): void {
    this.waiting.push(item);
    this.pump();
  }

  /** Takes a waiting item out (its client left); false when it is not waiting. */
  remove(item: T): boolean {
    const at = this.waiting.indexOf(item);
    if (at < 0) return false;
    this.waiting.splice(at, 1);
    return true;
  }

  /** Starts the oldest waiting items while there is room; call it whenever room may have grown. */
  pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.waiting.length > 0 && this.options.room() > 0) this.options.start(this.waiting.shift()!);
    } finally {
      this.pumping = false;
    }
  }
}
