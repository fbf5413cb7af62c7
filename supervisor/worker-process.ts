// One worker child process of one model instance: fork, state, requests in flight, heartbeats,
// restarts with backoff, and the tail of its output. The supervisor side of ipc/protocol.ts.
import { fork, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { createInterface } from 'node:readline';
import type { Logger } from 'pino';
import type { InferResult, SupervisorMessage, TileJob, WorkerConfig, WorkerInfo, WorkerMessage } from '../src/ipc/protocol.js';
import type { ServiceConfig } from './config.js';
import { DeadlineError, InferenceFailedError, TileInvalidError, WorkerGoneError } from './errors.js';
import { RestartPolicy } from './restart-policy.js';

export type WorkerState = 'loading' | 'ready' | 'restarting' | 'stopping' | 'stopped';

const WORKER_ENTRY = new URL('../src/worker/main.js', import.meta.url);
const TAIL_LINES = 100;

interface InFlight {
  resolve: (result: InferResult) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export interface WorkerProcessOptions {
  model: string;
  dir: string;
  instance: number;
  gpu: string | null;
  intraOpThreads: number;
  decodeThreads: number;
  maxBatch: number;
  maxDelayMs: number;
  config: ServiceConfig['supervisor'];
  logger: Logger;
  /** Restart after an exit; off for a reload candidate until it proves it loads. */
  autoRestart: boolean;
}

export interface WorkerExit {
  code: number | null;
  signal: string | null;
  at: string;
  /** The worker's last stderr lines before it exited. */
  stderr_tail: string[];
}

export class WorkerProcess extends EventEmitter<{ ready: [WorkerInfo]; exit: [WorkerExit]; batch: [number] }> {
  state: WorkerState = 'loading';
  info: WorkerInfo | null = null;
  restarts = 0;
  lastError: string | null = null;
  lastExit: WorkerExit | null = null;
  autoRestart: boolean;
  readonly tail: string[] = [];
  private child: ChildProcess | null = null;
  private startedAt = 0;
  private lastBeat = 0;
  private nextId = 1;
  private readonly inFlight = new Map<number, InFlight>();
  private readonly probes = new Map<number, (data: Record<string, unknown>) => void>();
  private readonly policy: RestartPolicy;
  /** Why the current process is about to exit, when we know better than its exit code. */
  private exitReason: string | null = null;
  private watchdog: NodeJS.Timeout | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private readonly log: Logger;

  constructor(private readonly options: WorkerProcessOptions) {
    super();
    this.autoRestart = options.autoRestart;
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
  get pid(): number | null {
    return this.child?.pid ?? null;
  }
  get outstanding(): number {
    return this.inFlight.size;
  }
  get uptimeMs(): number {
    return this.child ? Date.now() - this.startedAt : 0;
  }

  start(): void {
    const config: WorkerConfig = {
      model: this.options.model,
      dir: this.options.dir,
      intraOpThreads: this.options.intraOpThreads,
      decodeThreads: this.options.decodeThreads,
      maxBatch: this.options.maxBatch,
      maxDelayMs: this.options.maxDelayMs,
      heartbeatMs: this.options.config.heartbeat_interval_ms,
      gpu: this.options.gpu,
    };
    const child = fork(WORKER_ENTRY, [], {
      serialization: 'advanced',
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      execArgv: [],
      // CUDA_VISIBLE_DEVICES pins the worker to its GPU; empty hides every GPU from a CPU worker.
      env: { ...process.env, CUDA_VISIBLE_DEVICES: this.options.gpu ?? '', TILE_WORKER: JSON.stringify(config), UV_THREADPOOL_SIZE: String(config.decodeThreads) },
    });
    this.child = child;
    this.state = 'loading';
    this.startedAt = Date.now();
    this.lastBeat = Date.now();
    this.log.info({ workerPid: child.pid, gpu: this.options.gpu }, 'worker forked');
    for (const [stream, name] of [[child.stdout!, 'stdout'], [child.stderr!, 'stderr']] as const) {
      createInterface({ input: stream }).on('line', (line) => this.record(name, line));
    }
    child.on('message', (message: WorkerMessage) => this.onMessage(message));
    child.on('exit', (code, signal) => this.onExit(child, code, signal));
    child.on('error', (err) => this.log.error({ err }, 'worker process error'));
    this.watchdog ??= setInterval(() => this.checkHeartbeat(), this.options.config.heartbeat_interval_ms);
  }

  infer(job: TileJob, timeoutMs: number): Promise<InferResult> {
    const child = this.child;
    if (!child || this.state !== 'ready') return Promise.reject(new WorkerGoneError(`${this.id} is ${this.state}`));
    const id = this.nextId++;
    return new Promise<InferResult>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.inFlight.delete(id);
        reject(new DeadlineError(this.options.model, timeoutMs));
      }, timeoutMs);
      this.inFlight.set(id, { resolve, reject, timer });
      this.send({ type: 'infer', id, job });
    });
  }

  /** The worker's own probe, or an error entry when it does not answer in time. */
  probe(timeoutMs: number): Promise<Record<string, unknown>> {
    if (!this.child || (this.state !== 'ready' && this.state !== 'loading')) return Promise.resolve({ error: `worker is ${this.state}` });
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.probes.delete(id);
        resolve({ error: `worker did not answer its probe within ${timeoutMs} ms` });
      }, timeoutMs);
      this.probes.set(id, (data) => {
        clearTimeout(timer);
        resolve(data);
      });
      this.send({ type: 'probe', id });
    });
  }

  /** Lets requests in flight finish (up to graceMs), then stops the process for good. */
  async stop(graceMs: number): Promise<void> {
    this.autoRestart = false;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const child = this.child;
    if (!child || this.state === 'stopped') {
      this.state = 'stopped';
      this.clearWatchdog();
      return;
    }
    this.state = 'stopping';
    const deadline = Date.now() + graceMs;
    while (this.inFlight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const exited = new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));
    this.send({ type: 'stop' });
    const killer = setTimeout(() => child.kill('SIGKILL'), Math.max(1000, deadline - Date.now()));
    await exited;
    clearTimeout(killer);
  }

  private send(message: SupervisorMessage): void {
    if (this.child?.connected) this.child.send(message);
  }

  private record(stream: string, line: string): void {
    this.tail.push(`${new Date().toISOString()} ${stream} ${line}`);
    if (this.tail.length > TAIL_LINES) this.tail.shift();
    this.log.info({ workerPid: this.pid, stream }, line);
  }

  private onMessage(message: WorkerMessage): void {
    switch (message.type) {
      case 'heartbeat':
        this.lastBeat = Date.now();
        return;
      case 'ready':
        this.info = message.info;
        this.state = 'ready';
        this.lastBeat = Date.now();
        this.log.info({ workerPid: message.info.pid, provider: message.info.provider, loadMs: Math.round(message.info.loadMs) }, 'worker ready');
        this.emit('ready', message.info);
        return;
      case 'load-failed':
        this.exitReason = `load failed: ${message.reason}`;
        this.log.error({ workerPid: this.pid }, `model failed to load: ${message.reason}`);
        return;
      case 'log':
        this.record('log', message.msg);
        return;
      case 'probe':
        this.probes.get(message.id)?.(message.data);
        this.probes.delete(message.id);
        return;
      case 'result':
        this.emit('batch', message.batchSize);
        return this.settle(message.id, (p) => p.resolve(message));
      case 'invalid':
        return this.settle(message.id, (p) => p.reject(new TileInvalidError(message.errors)));
      case 'failed':
        return this.settle(message.id, (p) => p.reject(new InferenceFailedError(message.reason)));
    }
  }

  private settle(id: number, fn: (p: InFlight) => void): void {
    const pending = this.inFlight.get(id);
    if (!pending) return; // past its deadline: already answered
    this.inFlight.delete(id);
    clearTimeout(pending.timer);
    fn(pending);
  }

  private onExit(child: ChildProcess, code: number | null, signal: string | null): void {
    if (child !== this.child) return;
    const uptime = Date.now() - this.startedAt;
    this.child = null;
    this.info = null;
    const stderr = this.tail.filter((line) => line.includes(' stderr ')).slice(-5);
    this.lastExit = { code, signal, at: new Date().toISOString(), stderr_tail: stderr };
    if (this.state !== 'stopping') this.lastError = this.exitReason ?? `exited with ${signal ? `signal ${signal}` : `code ${code}`}`;
    this.exitReason = null;
    for (const [id, pending] of this.inFlight) {
      clearTimeout(pending.timer);
      pending.reject(new WorkerGoneError(`${this.id} exited with ${signal ?? code} while request ${id} was in flight`));
    }
    this.inFlight.clear();
    for (const resolve of this.probes.values()) resolve({ error: 'worker exited' });
    this.probes.clear();
    this.emit('exit', this.lastExit);
    if (!this.autoRestart) {
      this.state = 'stopped';
      this.clearWatchdog();
      return;
    }
    const delay = this.policy.nextDelay(uptime);
    this.state = 'restarting';
    this.restarts++;
    this.log.warn({ code, signal, uptimeMs: uptime, restartInMs: delay }, 'worker exited; restarting');
    this.restartTimer = setTimeout(() => this.start(), delay);
  }

  private checkHeartbeat(): void {
    if (!this.child) return;
    const { heartbeat_timeout_ms, load_timeout_ms } = this.options.config;
    if (this.state === 'loading' && Date.now() - this.startedAt > load_timeout_ms) {
      this.kill(`still loading after ${load_timeout_ms} ms; killed`);
    } else if (this.state === 'ready' && Date.now() - this.lastBeat > heartbeat_timeout_ms) {
      this.kill(`no heartbeat for ${Date.now() - this.lastBeat} ms; killed`);
    }
  }

  private kill(reason: string): void {
    this.exitReason = reason;
    this.log.error({ workerPid: this.pid }, `worker hung: ${reason}`);
    this.child?.kill('SIGKILL');
  }

  private clearWatchdog(): void {
    if (this.watchdog) clearInterval(this.watchdog);
    this.watchdog = null;
  }

  /** State for /diagnostics and /health. */
  snapshot() {
    return {
      id: this.id,
      model: this.options.model,
      instance: this.options.instance,
      pid: this.pid,
      state: this.state,
      gpu: this.options.gpu,
      cuda_visible_devices: this.info?.cudaVisibleDevices ?? null,
      provider: this.info?.provider ?? null,
      provider_warning: this.info?.providerWarning ?? null,
      intra_op_threads: this.options.intraOpThreads,
      restarts: this.restarts,
      uptime_s: Math.round(this.uptimeMs / 100) / 10,
      outstanding: this.outstanding,
      last_error: this.lastError,
      last_exit: this.lastExit,
      sha256: this.info?.sha256 ?? null,
    };
  }
}
