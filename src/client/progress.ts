// Progress of a run: on a terminal one line redrawn in place (done/total, tiles/s, ETA, retries);
// otherwise a plain log line every few seconds and at the end.
export class ProgressLine {
  private done: number;
  private readonly start = performance.now();
  private readonly startDone: number;
  private lastDraw = 0;

  constructor(
    private readonly label: string,
    private readonly total: number,
    done: number,
    private readonly retries: () => number,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.done = done;
    this.startDone = done;
    this.draw(true);
  }

  tick(): void {
    this.done++;
    this.draw(this.done === this.total);
  }

  private text(): string {
    const seconds = (performance.now() - this.start) / 1000;
    const rate = seconds > 0 ? (this.done - this.startDone) / seconds : 0;
    const eta = rate > 0 ? Math.round((this.total - this.done) / rate) : null;
    const etaText = eta === null ? '-' : `${Math.floor(eta / 60)}:${String(eta % 60).padStart(2, '0')}`;
    return `${this.label} ${this.done}/${this.total} tiles, ${rate.toFixed(1)} tiles/s, ETA ${etaText}, ${this.retries()} retries`;
  }

  private draw(force: boolean): void {
    const now = performance.now();
    const tty = this.stream.isTTY;
    if (!force && now - this.lastDraw < (tty ? 200 : 5000)) return;
    this.lastDraw = now;
    if (tty) this.stream.write(`\r\x1b[K${this.text()}${this.done === this.total ? '\n' : ''}`);
    else this.stream.write(`${new Date().toISOString()} ${this.text()}\n`);
  }
}
