// The life cycle of one model instance's worker process (TorchServe's WorkerLifeCycle): fork,
// state, heartbeats, restarts with backoff, the `failed` state for a package that cannot load,
// probes, and the tail of its output. Requests never pass through here: fronts send tiles to the
// worker's own socket. What reaches outside the process (fork, the clock and timers) comes in
// through `Outside`, so that tests run it in-process in milliseconds.
import { fork } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { InstanceState, InstanceView, WorkerControl, WorkerInfo, WorkerReport } from '../src/ipc/protocol.js';
import { workerEnv, type WorkerConfig } from '../src/ipc/fork-config.js';
import { RequestReply } from '../src/ipc/request-reply.js';
import type { ModelEntry, ServiceConfig } from '../src/config/config.js';
import type { ErrorCode } from '../src/lib/errors.js';
import type { GpuInfo } from '../src/gpu/nvidia-smi.js';
import { pciAddress, pinningEnv } from '../src/gpu/pinning.js';
import { systemClock, type Clock, type Timer } from './clock.js';
import { classifyExit, describeExit, type ExitCause, type Verdict } from './exit-cause.js';
import { RestartPolicy } from './restart-policy.js';
import { namesError } from '../src/lib/stderr-error.js';
import { TILE_PROCESS_EXEC_ARGV } from './v8-flags.js';

const WORKER_ENTRY = new URL('../src/worker/main.js', import.meta.url);
const TAIL_LINES = 100;
/** Deaths in a row while loading, never ready, before the instance is failed instead of restarted.
 *  A worker that never gets through a load without dying (an abort, a V8 heap OOM, a load timeout)
 *  does the same at every try: one death can be a neighbour's memory or a busy GPU, a second one
 *  in a row still might be; at three (about 0.7 s of backoff plus three loads) it is the package
 *  or the machine, and each further try only costs its CPU and an OOM report. */
export const LOAD_DEATHS_TO_FAIL = 3;
/** How long a worker that reported a device fault has to answer what it holds and exit. */
export const FAULT_EXIT_MS = 5000;

/** What the life cycle needs of a worker process (a ChildProcess forked with an IPC channel). */
export interface WorkerProcess {
  readonly pid?: number;
  readonly connected: boolean;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  send(message: WorkerControl): boolean;
  kill(signal: NodeJS.Signals): boolean;
  on(event: 'message', listener: (message: WorkerReport) => void): this;
  on(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  once(event: 'exit', listener: () => void): this;
}

/** What the life cycle reaches outside the process. */
export interface Outside {
  /** Starts a worker process with this environment. */
  fork(env: NodeJS.ProcessEnv): WorkerProcess;
  clock: Clock;
}

export const realOutside: Outside = {
  fork: (env) =>
    fork(WORKER_ENTRY, [], {
      serialization: 'advanced',
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      execArgv: TILE_PROCESS_EXEC_ARGV,
      env,
    }),
  clock: systemClock,
};

export interface WorkerLifeCycleOptions {
  model: string;
  dir: string;
  instance: number;
  gpu: string | null;
  /** The GPU as nvidia-smi lists it, for pinning webgpu too. */
  gpuInfo: GpuInfo | undefined;
  provider: ModelEntry['provider'];
  batchShapes: ModelEntry['batch_shapes'];
  intraOpThreads: number;
  decodeThreads: number;
  maxBatch: number;
  maxDelayMs: number;
  maxHeld: number;
  /** The Unix socket path this instance listens on (one per generation). */
  socketPath: (generation: number) => string;
  /** The service's data_dir: the worker keeps its package's per-file sha256s there. */
  dataDir: string;
  config: ServiceConfig['supervisor'];
  logger: Logger;
  /** Restart after an exit; off for a reload candidate until it proves it loads. */
  autoRestart: boolean;
  /** Default: real processes and time. */
  outside?: Outside;
}

export interface WorkerExit {
  pid: number | null;
  code: number | null;
  signal: string | null;
  at: string;
  /** Killed from outside rather than crashed, hung or failed. */
  external: boolean;
  /** Stopped after a device fault: its requests in flight were innocent too. */
  device_fault: boolean;
  /** The worker's last stderr lines before it exited. */
  stderr_tail: string[];
}

/** One worker's life cycle. Its state changes only through its own methods: the pool starts,
 *  promotes, retries and stops it, and reads the rest. */
export class WorkerLifeCycle extends EventEmitter<{ ready: [WorkerInfo]; exit: [WorkerExit]; change: [] }> {
  #state: InstanceState = 'loading';
  #info: WorkerInfo | null = null;
  #restarts = 0;
  #lastError: string | null = null;
  #lastExit: WorkerExit | null = null;
  #autoRestart: boolean;
  readonly #tail: string[] = [];
  /** Whether any process of this instance became ready: only one that never did can be failed
   *  for dying while loading; one that served keeps being restarted. */
  private everReady = false;
  /** Deaths in a row while loading (LOAD_DEATHS_TO_FAIL); a package fault fails at once anyway. */
  private loadDeaths = 0;
  /** Why the instance was failed for its load deaths, without the stderr line: that line may still
   *  be on its way when the exit arrives (a V8 OOM report is long), so the reason is completed then. */
  private loadDeathsReason: string | null = null;
  /** The last process's last stderr line, and the last one that names an error (kept after it
   *  exits, until the next start). */
  private stderrLast: string | null = null;
  private stderrError: string | null = null;
  private child: WorkerProcess | null = null;
  private generation = 0;
  private startedAt = 0;
  private lastBeat = 0;
  private readonly probes = new RequestReply<Record<string, unknown>>();
  private readonly policy: RestartPolicy;
  /** Why the current process is about to exit, when we know better than its exit code. */
  private verdict: Verdict | null = null;
  /** The package is at fault: wait for its files to change (or a slow retry, or SIGHUP). */
  private packageFault = false;
  /** The code of the last load failure (TILE_ERR_PACKAGE_*, TILE_ERR_MODEL_LOAD), for the log. */
  private loadErrorCode: ErrorCode | null = null;
  private watchdog: Timer | null = null;
  private restartTimer: Timer | null = null;
  private faultKill: Timer | undefined;
  private readonly log: Logger;
  private readonly outside: Outside;
  private readonly clock: Clock;

  constructor(private readonly options: WorkerLifeCycleOptions) {
    super();
    this.#autoRestart = options.autoRestart;
    this.outside = options.outside ?? realOutside;
    this.clock = this.outside.clock;
    this.log = options.logger.child({ model: options.model, instance: options.instance });
    this.policy = new RestartPolicy({
      initialDelayMs: options.config.restart_initial_delay_ms,
      maxDelayMs: options.config.restart_max_delay_ms,
      resetAfterMs: options.config.restart_reset_after_ms,
    });
  }

  get id(): string {
    return `${this.options.model}#${this.options.instance}`;
  }
  get gpu(): string | null {
    return this.options.gpu;
  }
  get model(): string {
    return this.options.model;
  }
  get instance(): number {
    return this.options.instance;
  }
  get pid(): number | null {
    return this.child?.pid ?? null;
  }
  get uptimeMs(): number {
    return this.child ? this.clock.now() - this.startedAt : 0;
  }
  get state(): InstanceState {
    return this.#state;
  }
  /** What the worker said of itself when it became ready; null while it has no ready process. */
  get info(): WorkerInfo | null {
    return this.#info;
  }
  get restarts(): number {
    return this.#restarts;
  }
  get lastError(): string | null {
    return this.#lastError;
  }
  get lastExit(): WorkerExit | null {
    return this.#lastExit;
  }
  /** The last lines of the worker's output and logs. */
  get tail(): readonly string[] {
    return this.#tail;
  }

  start(): void {
    this.clock.clear(this.restartTimer);
    this.restartTimer = null;
    const generation = ++this.generation;
    const socket = this.options.socketPath(generation - 1);
    const config: WorkerConfig = {
      model: this.options.model,
      dir: this.options.dir,
      intraOpThreads: this.options.intraOpThreads,
      decodeThreads: this.options.decodeThreads,
      maxBatch: this.options.maxBatch,
      maxDelayMs: this.options.maxDelayMs,
      maxHeld: this.options.maxHeld,
      heartbeatMs: this.options.config.heartbeat_interval_ms,
      gpu: this.options.gpu,
      gpuPci: this.options.gpuInfo ? pciAddress(this.options.gpuInfo.pci_bus_id) : null,
      gpuUuid: this.options.gpuInfo?.uuid ?? null,
      provider: this.options.provider,
      batchShapes: this.options.batchShapes,
      socket,
      dataDir: this.options.dataDir,
    };
    const child = this.outside.fork({
      ...process.env,
      ...pinningEnv(this.options.gpu, this.options.gpuInfo),
      ...workerEnv(config),
      UV_THREADPOOL_SIZE: String(config.decodeThreads),
    });
    this.child = child;
    this.packageFault = false;
    this.loadErrorCode = null;
    this.stderrLast = null;
    this.stderrError = null;
    this.loadDeathsReason = null;
    this.setState('loading');
    this.startedAt = this.clock.now();
    this.lastBeat = this.clock.now();
    this.log.debug({ workerPid: child.pid, gpu: this.options.gpu }, 'worker forked');
    createInterface({ input: child.stdout! }).on('line', (line) => this.record('stdout', line, 'info'));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      if (this.generation === generation) this.noteStderr(line);
      this.record('stderr', line, 'warn');
    });
    child.on('message', (message: WorkerReport) => this.onReport(message));
    child.on('exit', (code, signal) => this.onExit(child, code, signal));
    child.on('error', (err) => this.log.error({ err }, 'worker process error'));
    this.watchdog ??= this.clock.setInterval(() => this.checkHeartbeat(), this.options.config.heartbeat_interval_ms);
  }

  /** The worker's own probe, or an error entry when it does not answer in time. */
  async probe(timeoutMs: number): Promise<Record<string, unknown>> {
    const child = this.child;
    if (!child?.connected || (this.#state !== 'ready' && this.#state !== 'loading'))
      return { error: `worker is ${this.#state}` };
    return this.probes
      .request((id) => child.send({ type: 'probe', id } satisfies WorkerControl), {
        ms: timeoutMs,
        error: () => new Error(`worker did not answer its probe within ${timeoutMs} ms`),
      })
      .catch((err: Error) => ({ error: err.message }));
  }

  /** A failed instance tries again now (SIGHUP, changed files). */
  retryNow(): void {
    if (this.#state === 'failed') this.start();
  }

  /** A reload candidate that loaded takes its instance's place: from now on it is restarted, and
   *  its restarts count on from those of the instance it replaces (`restarts`), since the start. */
  promote(restarts: number): void {
    this.#autoRestart = true;
    this.#restarts += restarts;
  }

  /** A replacement for this instance failed to load: this one keeps serving, and says why. */
  replacementFailed(reason: string | null): void {
    this.#lastError = `reload failed: ${reason}`;
  }

  /** Lets requests in flight finish (up to graceMs), then stops the process for good. */
  async stop(graceMs: number): Promise<void> {
    this.#autoRestart = false;
    this.clock.clear(this.restartTimer);
    const child = this.child;
    if (!child) {
      this.setState('stopped');
      this.clearWatchdog();
      return;
    }
    this.setState('stopping');
    const exited = new Promise<void>((resolve) =>
      child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve()),
    );
    // The worker answers every tile it has, then exits; fronts route new tiles elsewhere.
    if (child.connected) child.send({ type: 'stop' } satisfies WorkerControl);
    const killer = this.clock.setTimeout(() => child.kill('SIGKILL'), Math.max(1000, graceMs));
    await exited;
    this.clock.clear(killer);
  }

  private setState(state: InstanceState): void {
    if (this.#state === state) return;
    this.#state = state;
    this.emit('change');
  }

  private record(stream: 'stdout' | 'stderr' | 'log', line: string, level: 'info' | 'warn' | 'error'): void {
    this.#tail.push(`${new Date(this.clock.now()).toISOString()} ${stream} ${line}`);
    if (this.#tail.length > TAIL_LINES) this.#tail.shift();
    this.log[level]({ workerPid: this.pid, stream }, line);
  }

  private onReport(message: WorkerReport): void {
    switch (message.type) {
      case 'heartbeat':
        this.lastBeat = this.clock.now();
        return;
      case 'ready': {
        const { info } = message;
        this.#info = info;
        this.everReady = true;
        this.loadDeaths = 0;
        this.lastBeat = this.clock.now();
        this.log.info(
          {
            workerPid: info.pid,
            provider: info.provider,
            providerSkipped: info.providerSkipped,
            adapter: info.adapter?.name,
            loadMs: Math.round(info.loadMs),
            sessionMs: Math.round(info.sessionMs),
            warmupMs: Object.fromEntries(info.warmup.checks.map((c) => [c.batch, c.ms])),
            batchShapes: info.warmup.shapes,
          },
          'worker ready',
        );
        this.setState('ready');
        this.emit('ready', info);
        return;
      }
      case 'device-fault':
        // Not ready at once: fronts stop routing here. The worker answers what it holds and exits;
        // if it cannot (a run that never returns), it is killed.
        this.verdict = { kind: 'device-fault', reason: message.reason };
        this.log.error(
          { workerPid: this.pid, errorCode: 'TILE_ERR_MODEL_DEVICE_FAULT', reason: message.reason },
          'worker device fault; restarting it',
        );
        this.setState('restarting');
        this.faultKill = this.clock.setTimeout(() => this.child?.kill('SIGKILL'), FAULT_EXIT_MS);
        return;
      case 'load-failed':
        this.verdict = { kind: 'load-failed', reason: message.reason, code: message.code };
        this.packageFault = message.packageFault;
        this.loadErrorCode = message.code;
        return;
      case 'log':
        return this.record('log', message.msg, message.level);
      case 'probe':
        this.probes.settle(message.id, message.data);
        return;
    }
  }

  private onExit(child: WorkerProcess, code: number | null, signal: string | null): void {
    if (child !== this.child) return;
    this.clock.clear(this.faultKill);
    const uptime = this.clock.now() - this.startedAt;
    const stopping = this.#state === 'stopping';
    const diedLoading = this.#state === 'loading' && !this.everReady;
    const cause = classifyExit(this.verdict, stopping, code, signal);
    this.child = null;
    this.#info = null;
    this.verdict = null;
    this.#lastExit = this.exitRecord(child, code, signal, cause);
    if (!stopping) this.#lastError = describeExit(cause);
    this.probes.rejectAll(() => new Error('worker exited'));
    this.emit('exit', this.#lastExit);
    if (!this.#autoRestart) {
      this.setState('stopped');
      this.clearWatchdog();
      return;
    }
    this.#restarts++;
    if (this.packageFault) return this.fail();
    if (diedLoading && ++this.loadDeaths >= LOAD_DEATHS_TO_FAIL) {
      // A load failure too, without the worker's word: named as one, with the load's code.
      this.loadErrorCode = 'TILE_ERR_MODEL_LOAD';
      this.loadDeathsReason = `load failed [${this.loadErrorCode}]: ${this.#lastError} while loading, ${this.loadDeaths} times in a row and never ready`;
      this.describeLoadDeaths();
      return this.fail();
    }
    const delay = this.policy.nextDelay(uptime);
    this.log.warn(
      {
        code,
        signal,
        uptimeMs: uptime,
        restartInMs: delay,
        reason: this.#lastError,
        errorCode: this.loadErrorCode ?? undefined,
      },
      'worker exited; restarting',
    );
    this.setState('restarting');
    this.restartTimer = this.clock.setTimeout(() => this.start(), delay);
  }

  private exitRecord(child: WorkerProcess, code: number | null, signal: string | null, cause: ExitCause): WorkerExit {
    return {
      pid: child.pid ?? null,
      code,
      signal,
      at: new Date(this.clock.now()).toISOString(),
      external: cause.kind === 'external',
      device_fault: cause.kind === 'device-fault',
      stderr_tail: this.#tail.filter((line) => line.includes(' stderr ')).slice(-5),
    };
  }

  private noteStderr(line: string): void {
    const text = line.trim();
    if (!text) return;
    this.stderrLast = text;
    if (namesError(text)) this.stderrError = text;
    if (this.loadDeathsReason) {
      this.describeLoadDeaths();
      this.emit('change');
    }
  }

  private describeLoadDeaths(): void {
    const said = this.stderrError ?? this.stderrLast;
    this.#lastError = `${this.loadDeathsReason}${said ? `; stderr: ${said}` : ''}`;
  }

  /** The package cannot load: retried when its files change, on SIGHUP, or after a long wait. */
  private fail(): void {
    const { failed_retry_ms, package_poll_ms } = this.options.config;
    this.log.error(
      { errorCode: this.loadErrorCode, reason: this.#lastError, retryInMs: failed_retry_ms },
      'model failed to load; waiting for its files to change, SIGHUP, or the retry',
    );
    this.setState('failed');
    const seen = this.packageStamp();
    const since = this.clock.now();
    const check = () => {
      if (this.#state !== 'failed') return;
      if (this.packageStamp() !== seen || this.clock.now() - since >= failed_retry_ms) return this.start();
      this.restartTimer = this.clock.setTimeout(check, package_poll_ms);
    };
    this.restartTimer = this.clock.setTimeout(check, package_poll_ms);
  }

  /** Names, sizes and times of the package's files: changes when anything in it does. */
  private packageStamp(): string {
    try {
      return readdirSync(this.options.dir)
        .sort()
        .map((name) => {
          const s = statSync(join(this.options.dir, name));
          return `${name}:${s.size}:${s.mtimeMs}`;
        })
        .join('|');
    } catch (err) {
      return `unreadable: ${(err as Error).message}`;
    }
  }

  private checkHeartbeat(): void {
    if (!this.child) return;
    const { heartbeat_timeout_ms, load_timeout_ms } = this.options.config;
    const now = this.clock.now();
    if (this.#state === 'loading' && now - this.startedAt > load_timeout_ms) {
      this.kill(`still loading after ${load_timeout_ms} ms; killed`);
    } else if (this.#state === 'ready' && now - this.lastBeat > heartbeat_timeout_ms) {
      this.kill(`no heartbeat for ${now - this.lastBeat} ms; killed`);
    }
  }

  private kill(reason: string): void {
    this.verdict = { kind: 'hung', reason };
    this.log.error({ workerPid: this.pid, reason }, 'worker hung; killed');
    this.child?.kill('SIGKILL');
  }

  private clearWatchdog(): void {
    this.clock.clear(this.watchdog);
    this.watchdog = null;
  }

  /** What fronts need to route to this instance. */
  view(): InstanceView {
    const info = this.#info;
    return {
      id: this.id,
      pid: this.pid,
      state: this.#state,
      socket: this.#state === 'ready' ? (info?.socket ?? null) : null,
      restarts: this.#restarts,
      gpu: this.options.gpu,
      provider: info?.provider ?? null,
      providerSkipped: info?.providerSkipped ?? [],
      adapter: info?.adapter ?? null,
      loadMs: info ? Math.round(info.loadMs) : null,
      warmup: info?.warmup ?? null,
      lastError: this.#lastError,
    };
  }

  /** State for /diagnostics: the fronts' view in its own names, with what only an operator needs. */
  snapshot() {
    const view = this.view();
    return {
      id: view.id,
      model: this.options.model,
      instance: this.options.instance,
      pid: view.pid,
      state: view.state,
      gpu: view.gpu,
      cuda_visible_devices: this.#info?.cudaVisibleDevices ?? null,
      provider: view.provider,
      provider_skipped: view.providerSkipped,
      adapter: view.adapter,
      load_ms: view.loadMs,
      warmup: view.warmup,
      intra_op_threads: this.options.intraOpThreads,
      restarts: view.restarts,
      uptime_s: Math.round(this.uptimeMs / 100) / 10,
      last_error: view.lastError,
      last_exit: this.#lastExit,
      sha256: this.#info?.sha256 ?? null,
    };
  }
}
