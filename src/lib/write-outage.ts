// A file the service keeps writing after the start (LOG_FILE, the usage log) that fails: the disk
// full, its folder removed. The process serves on; the failure is said once when it starts (not
// per failed write), the writes it cost are counted, and its end is said once, by the first write
// that works. Shared by src/lib/logger.ts and supervisor/usage-log.ts.

export interface OutageNotices {
  failed: (err: Error) => void;
  /** `dropped`: what the writer counted as lost meanwhile; `failedMs`: how long it failed. */
  resumed: (dropped: number, failedMs: number) => void;
}

export class WriteOutage {
  #since: number | null = null;
  #dropped = 0;
  #lastTry = 0;

  /** `retryMs`: how often a writer that opens the file again (the usage log) may try it while
   *  it fails, so that a full disk is not tried by every request. */
  constructor(
    private readonly notices: OutageNotices,
    private readonly retryMs = 0,
  ) {}

  get failing(): boolean {
    return this.#since !== null;
  }

  /** A write or an open failed: said only when it is the first. */
  failed(err: Error, now = Date.now()): void {
    this.#lastTry = now;
    if (this.#since !== null) return;
    this.#since = now;
    this.notices.failed(err);
  }

  /** Entries (or lines) lost to the failure. */
  drop(count: number): void {
    this.#dropped += count;
  }

  /** Whether a failing file may be tried again now (once per retryMs); a working one always. */
  mayTry(now = Date.now()): boolean {
    if (this.#since === null) return true;
    if (now - this.#lastTry < this.retryMs) return false;
    this.#lastTry = now;
    return true;
  }

  /** A write (or a reopen) worked: the failure, if any, is over. */
  worked(now = Date.now()): void {
    if (this.#since === null) return;
    const failedMs = now - this.#since;
    const dropped = this.#dropped;
    this.#since = null;
    this.#dropped = 0;
    this.notices.resumed(dropped, failedMs);
  }
}
