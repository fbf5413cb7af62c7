// The one request/reply mechanism between processes and threads (node's cluster utils.js
// sendHelper is the model): a request gets an id, its reply settles the matching promise, and a
// timer answers for a peer that never replies. Every channel, IPC link and session thread uses it.

interface Pending<T> {
  resolve: (value: T) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout | null;
}

export class RequestReply<T> {
  private nextId = 1;
  private readonly pending = new Map<number, Pending<T>>();

  /** Requests awaiting their reply. */
  get size(): number {
    return this.pending.size;
  }

  /** Calls `send` with a fresh id and waits for `settle(id, ...)`; with a timeout, rejects with
   *  `timeout.error()` after `timeout.ms`. A throwing `send` rejects at once. */
  request(send: (id: number) => void, timeout?: { ms: number; error: () => Error }): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = timeout
        ? setTimeout(() => {
            this.pending.delete(id);
            reject(timeout.error());
          }, timeout.ms)
        : null;
      this.pending.set(id, { resolve, reject, timer });
      try {
        send(id);
      } catch (err) {
        this.settle(id, err as Error);
      }
    });
  }

  /** Settles request `id` with a value, or an Error to reject it. False when it is no longer
   *  waiting (answered by its timer already). */
  settle(id: number, outcome: T | Error): boolean {
    const p = this.pending.get(id);
    if (!p) return false;
    this.pending.delete(id);
    if (p.timer) clearTimeout(p.timer);
    if (outcome instanceof Error) p.reject(outcome);
    else p.resolve(outcome);
    return true;
  }

  /** Rejects every request waiting (the peer is gone). */
  rejectAll(makeError: (id: number) => Error): void {
    for (const id of [...this.pending.keys()]) this.settle(id, makeError(id));
  }
}
