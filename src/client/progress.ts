// One progress display for a run over slides and tiles (cli-progress): on a terminal a bar redrawn
// in place; otherwise the same line printed every few seconds. It is redrawn on a timer, not only
// when a tile finishes, so that a run waiting on an unreachable server shows its retries.
import { SingleBar } from 'cli-progress';

export interface RetryState {
  retries: number;
  /** The last retry's reason while tiles are waiting on it; null once a tile gets through. */
  waiting: string | null;
}

export class CohortProgress {
  private readonly bar: SingleBar;
  private readonly tty: boolean;
  private slidesDone = 0;
  private tiles = 0;
  private done = 0;
  private readonly started = performance.now();
  private startDone = 0;
  /** Redraws with fresh retry counts while no tile finishes. */
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly slides: number,
    private readonly retries: () => RetryState,
    private readonly stream: NodeJS.WriteStream = process.stderr,
    intervalMs = 5000,
  ) {
    this.tty = Boolean(stream.isTTY);
    this.bar = new SingleBar({
      stream,
      format:
        '{slides} slides | {bar} {value}/{total} tiles | {rate} tiles/s | ETA {remaining} | {retries} retries{waiting}',
      noTTYOutput: true,
      notTTYSchedule: intervalMs,
      fps: 5,
      forceRedraw: true,
      hideCursor: false,
      barsize: 20,
    });
    this.bar.start(0, 0, this.payload());
    this.timer = setInterval(() => this.update(), 1000).unref();
  }

  private payload() {
    const seconds = (performance.now() - this.started) / 1000;
    const rate = seconds > 0 ? (this.done - this.startDone) / seconds : 0;
    // Over the tiles planned so far: slides not yet opened are not in it.
    const eta = rate > 0 ? Math.round((this.tiles - this.done) / rate) : null;
    const r = this.retries();
    return {
      slides: `${this.slidesDone}/${this.slides}`,
      rate: rate.toFixed(1),
      remaining: eta === null ? '-' : `${Math.floor(eta / 60)}:${String(eta % 60).padStart(2, '0')}`,
      retries: r.retries,
      waiting: r.waiting ? ` (waiting: ${r.waiting})` : '',
    };
  }

  private update(): void {
    this.bar.setTotal(this.tiles);
    this.bar.update(this.done, this.payload());
  }

  /** A slide's grid is known: `total` tiles, `done` of them from an earlier run. */
  plan(total: number, done: number): { tick(): void } {
    this.tiles += total;
    this.done += done;
    this.startDone += done;
    this.update();
    return {
      tick: () => {
        this.done++;
        this.update();
      },
    };
  }

  /** A slide finished (done, failed or skipped): its line goes above the bar. */
  slideDone(line: string): void {
    this.slidesDone++;
    this.log(line);
    this.update();
  }

  log(line: string): void {
    this.stream.write(this.tty ? `\r\x1b[K${line}\n` : `${line}\n`);
  }

  stop(): void {
    clearInterval(this.timer);
    this.update();
    this.bar.stop();
    if (this.tty) this.stream.write('\n');
  }
}
