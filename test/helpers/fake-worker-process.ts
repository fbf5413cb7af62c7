// Stand-ins for the operating system's side of a worker process, for in-process tests of the
// supervisor's life cycles: fork() hands out FakeWorkerProcess objects that the test drives
// (reports, output, exits) and inspects (messages sent, signals). The life cycle code under test
// is the real one.
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type { ServiceConfig } from '../../src/config/config.js';
import type { WorkerControl, WorkerInfo, WorkerReport } from '../../src/ipc/protocol.js';
import type { ErrorCode } from '../../src/lib/errors.js';
import { ExitCode } from '../../src/lib/exit-codes.js';
import type { Outside, WorkerProcess } from '../../supervisor/worker-life-cycle.js';
import { FakeClock } from './fake-clock.js';

let nextPid = 40000;

/** Supervisor settings for these tests: short, so that a test's clock moves little. */
export const SUPERVISOR: ServiceConfig['supervisor'] = {
  heartbeat_interval_ms: 100,
  heartbeat_timeout_ms: 1000,
  load_timeout_ms: 5000,
  restart_initial_delay_ms: 100,
  restart_max_delay_ms: 1000,
  restart_reset_after_ms: 60000,
  drain_delay_ms: 0,
  shutdown_grace_ms: 2000,
  probe_timeout_ms: 500,
  failed_retry_ms: 300000,
  package_poll_ms: 2000,
};

export class FakeWorkerProcess extends EventEmitter implements WorkerProcess {
  readonly pid = nextPid++;
  connected = true;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly sent: WorkerControl[] = [];
  readonly signals: NodeJS.Signals[] = [];

  constructor(
    readonly env: NodeJS.ProcessEnv,
    private readonly onStop: (proc: FakeWorkerProcess) => void,
  ) {
    super();
  }

  send(message: WorkerControl): boolean {
    this.sent.push(message);
    if (message.type === 'stop') this.onStop(this);
    return true;
  }

  /** As the OS: a signal ends the process (on a later turn, as a real exit event arrives). */
  kill(signal: NodeJS.Signals): boolean {
    this.signals.push(signal);
    if (this.exited) return false;
    setImmediate(() => this.exit(null, signal));
    return true;
  }

  get exited(): boolean {
    return this.exitCode !== null || this.signalCode !== null;
  }

  /** The worker reports to the supervisor over IPC. */
  report(message: WorkerReport): void {
    this.emit('message', message);
  }

  ready(info: Partial<WorkerInfo> = {}): void {
    this.report({ type: 'ready', info: workerInfo({ pid: this.pid, socket: `/tmp/fake-${this.pid}.sock`, ...info }) });
  }

  /** As a worker whose load failed: it says why, then exits LOAD_FAILED (src/worker/main.ts). */
  failLoad(reason: string, code: ErrorCode, packageFault = true): void {
    this.report({ type: 'load-failed', reason, packageFault, code });
    this.exit(ExitCode.LOAD_FAILED);
  }

  exit(code: number | null, signal: NodeJS.Signals | null = null): void {
    if (this.exited) return;
    this.exitCode = code;
    this.signalCode = signal;
    this.connected = false;
    this.emit('exit', code, signal);
  }
}

/** A fork that records every process it starts, and a clock moved by hand. */
export class FakeOutside implements Outside {
  readonly clock = new FakeClock();
  readonly forked: FakeWorkerProcess[] = [];
  /** What a worker does when told to stop; default: it has nothing in flight and exits at once. */
  onStop: (proc: FakeWorkerProcess) => void = (proc) => setImmediate(() => proc.exit(0));

  fork(env: NodeJS.ProcessEnv): FakeWorkerProcess {
    const proc = new FakeWorkerProcess(env, (p) => this.onStop(p));
    this.forked.push(proc);
    return proc;
  }

  get last(): FakeWorkerProcess {
    const proc = this.forked.at(-1);
    if (!proc) throw new Error('nothing forked yet');
    return proc;
  }
}

/** A ready report's info, as a CPU worker would send it (the manifest is not read here). */
export function workerInfo(info: Partial<WorkerInfo>): WorkerInfo {
  return {
    pid: 1,
    model: 'gene-expr',
    sha256: 'f'.repeat(64),
    manifest: {} as WorkerInfo['manifest'],
    provider: 'cpu',
    providerSkipped: [],
    adapter: null,
    cudaVisibleDevices: null,
    onnxruntime: '1.30.0',
    intraOpThreads: 1,
    loadMs: 120.4,
    sessionMs: 80,
    warmup: {
      shapes: [1, 8],
      checks: [{ batch: 8, ms: 3, identical: true }],
      deterministic: true,
      batchIndependent: true,
      note: null,
    },
    socket: '/tmp/fake.sock',
    ...info,
  };
}
