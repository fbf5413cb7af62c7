// Worker process entry: owns one model session. Forked by the supervisor with its WorkerConfig in
// TILE_WORKER and CUDA_VISIBLE_DEVICES set. Life cycle over process IPC with the supervisor;
// tiles over a Unix socket that every HTTP front connects to (ipc/protocol.ts).
import { createServer } from 'node:net';
import { rmSync } from 'node:fs';
import ort from '../lib/onnxruntime.js';
import type { ChannelRequest, WarmupReport, WorkerControl, WorkerMessage, WorkerReport } from '../ipc/protocol.js';
import { readWorkerConfig } from '../ipc/fork-config.js';
import { Channel } from '../ipc/channel.js';
import { ExitCode } from '../lib/exit-codes.js';
import { readPackage, type ModelPackage } from '../model-package/model-package.js';
import { ModelSession } from './model-session.js';
import { FrontHearing, type LoadBeat, reportLoad } from './load-reports.js';
import { ModelWorker, type Reply } from './model-worker.js';
import { loadFailure } from './load-failure.js';

const config = readWorkerConfig();
const send = (message: WorkerReport, done?: () => void) => process.send!(message, undefined, undefined, done);

/** After a device fault, how long the worker lingers once it has answered what it held. */
const FAULT_EXIT_DELAY_MS = 200;

async function main(): Promise<void> {
  const started = performance.now();
  let worker: ModelWorker | null = null;
  let pkg: ModelPackage;
  let session: ModelSession;
  let warmup: WarmupReport;
  let stopping = false;
  /** OK for a stop; DEVICE_FAULT once the device failed, however the worker then exits. */
  let exitCode: number = ExitCode.OK;
  /** Each front's channel, and what it last heard of the load. */
  const channels = new Map<Channel<ChannelRequest, WorkerMessage>, FrontHearing>();
  /** The fronts' load reports, once the worker is loaded; woken by tiles. */
  let loadBeat: LoadBeat | null = null;
  // A stopping worker serves on until every front has hung up: a front hangs up once it knows
  // this instance is no longer ready and its requests here are answered. Refusing a request
  // sent before the front knew would leave a model with one instance nowhere to route it.
  const exitWhenAlone = () => {
    if (stopping && channels.size === 0) void worker!.idle().then(() => process.exit(exitCode));
  };

  /** A device error: refuse new tiles (the fronts retry them elsewhere), tell the supervisor,
   *  answer what is queued, and exit to be restarted with a fresh device context. */
  const onDeviceFault = (reason: string) => {
    if (stopping) return;
    stopping = true;
    exitCode = ExitCode.DEVICE_FAULT;
    console.error(`device fault, restarting: ${reason}`);
    send({ type: 'device-fault', reason });
    // Answers written, and the fronts told by the supervisor to route elsewhere, before the exit.
    void worker!.idle().then(() => setTimeout(() => process.exit(exitCode), FAULT_EXIT_DELAY_MS));
  };

  /** One channel per front; each request is answered on the channel it came from. The server
   *  listens only once the worker is loaded. */
  const server = createServer((socket) => {
    const channel = new Channel<ChannelRequest, WorkerMessage>(socket);
    const hearing = new FrontHearing((load) => channel.isOpen && channel.send({ type: 'load', load }), worker!.load());
    channels.set(channel, hearing);
    const reply: Reply = (message) => {
      if (!channel.isOpen) return;
      channel.send(message);
      hearing.heard(message.load);
    };
    const link = worker!.link(reply);
    channel.on('close', () => {
      channels.delete(channel);
      worker!.unlink(link);
      exitWhenAlone();
    });
    channel.on('message', (message) => {
      if (message.type === 'cancel') link.cancel(message.ids);
      else {
        link.acceptAll(message.tiles, message.deadline);
        loadBeat?.wake();
      }
    });
  });

  process.on('message', (message: WorkerControl) => {
    if (message.type === 'probe') {
      return send({
        type: 'probe',
        id: message.id,
        data: {
          pid: process.pid,
          uptime_s: process.uptime(),
          memory: process.memoryUsage(),
          ...(worker?.load() ?? { queued: 0, held: 0 }),
          ...worker?.stats,
        },
      });
    }
    if (message.type === 'stop') {
      // Before it has loaded, nobody is connected and there is nothing to finish.
      if (!worker) process.exit(ExitCode.OK);
      stopping = true;
      server.close();
      exitWhenAlone();
    }
  });
  // The supervisor is gone: nobody can use our answers.
  process.on('disconnect', () => process.exit(ExitCode.OK));
  process.on('exit', () => rmSync(config.socket, { force: true }));
  // Ctrl-C and a group-wide SIGTERM reach every process; the supervisor drains and stops its
  // workers itself, after the fronts have finished with them. A group-wide SIGUSR2 (a logrotate
  // script's `kill -USR2 -PGID`) is the supervisor's and the fronts' to reopen their log: by
  // Node's default it stopped every worker (every model 503 until they were loaded again).
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGUSR2'] as const) process.on(signal, () => {});
  // Heartbeats from the start (the supervisor checks them once the worker is ready; while it
  // loads, a load timeout applies instead, since ONNX Runtime parses the graph synchronously).
  setInterval(() => send({ type: 'heartbeat' }), config.heartbeatMs);

  try {
    pkg = readPackage(config.dir, {
      folder: config.dataDir,
      warn: (msg) => send({ type: 'log', level: 'warn', msg }),
    });
    session = await ModelSession.open(pkg, config);
    const { provider, skipped } = session.choice;
    for (const s of skipped)
      send({
        type: 'log',
        level: config.gpu !== null && provider === 'cpu' ? 'warn' : 'info',
        msg: `provider ${s.provider} passed over: ${s.reason}`,
      });
    for (const msg of session.plan.warnings) send({ type: 'log', level: 'warn', msg });
    const candidate = new ModelWorker(pkg, session, {
      maxBatch: config.maxBatch,
      maxDelayMs: config.maxDelayMs,
      maxHeld: config.maxHeld,
      batchShapes: config.batchShapes,
      onDeviceFault,
    });
    warmup = await candidate.warmup(pkg.manifest.warmup?.iterations ?? 1);
    for (const c of warmup.checks)
      if (!c.identical)
        send({
          type: 'log',
          level: 'info',
          msg: `batches of ${c.batch} are padded: a tile's outputs there differ from the first row of a batch of ${warmup.checks.at(-1)!.batch} (${c.difference})`,
        });
    if (warmup.note) send({ type: 'log', level: 'warn', msg: warmup.note });
    worker = candidate;
    loadBeat = reportLoad(
      () => candidate.load(),
      () => channels.values(),
    );
    rmSync(config.socket, { force: true });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(config.socket, resolve));
  } catch (err) {
    const { reason, packageFault, code } = loadFailure(err);
    console.error(`model ${config.model} failed to load [${code}]: ${reason}`);
    send({ type: 'load-failed', reason, packageFault, code }, () => process.exit(ExitCode.LOAD_FAILED));
    return;
  }
  send({
    type: 'ready',
    info: {
      pid: process.pid,
      model: config.model,
      sha256: pkg.sha256,
      manifest: pkg.manifest,
      provider: session.choice.provider,
      providerSkipped: session.choice.skipped,
      adapter: session.choice.adapter,
      cudaVisibleDevices: process.env.CUDA_VISIBLE_DEVICES ?? null,
      onnxruntime: ort.env.versions.node ?? 'unknown',
      intraOpThreads: config.intraOpThreads,
      loadMs: performance.now() - started,
      sessionMs: session.sessionMs,
      warmup,
      socket: config.socket,
    },
  });
}

void main();
