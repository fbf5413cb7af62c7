// Exponential restart backoff in the spirit of OTP supervisors and systemd's RestartSec: the first
// restart is quick, each further one waits twice as long up to a cap, and a worker that stayed up
// for `resetAfterMs` starts again from the first delay.
export interface RestartPolicyOptions {
  initialDelayMs: number;
  maxDelayMs: number;
  resetAfterMs: number;
}

export class RestartPolicy {
  private failures = 0;

  constructor(private readonly options: RestartPolicyOptions) {}

  /** Delay before the next start, given how long the last run stayed up. */
  nextDelay(uptimeMs: number): number {
    if (uptimeMs >= this.options.resetAfterMs) this.failures = 0;
    const delay = Math.min(this.options.maxDelayMs, this.options.initialDelayMs * 2 ** this.failures);
    this.failures++;
    return delay;
  }
}
