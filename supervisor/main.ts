// `npm start`: the supervisor, the node:cluster primary. Forks the model workers and the HTTP
// fronts and handles signals: SIGTERM/SIGINT drain and stop gracefully, SIGHUP reloads the model
// packages one worker at a time, SIGUSR2 reopens LOG_FILE in every process that writes it. It
// also stops when its parent dies.
import { prepareStart } from './cli.js';
import { createLogger, reopenLogFile } from '../src/lib/logger.js';
import { discoverGpus } from './gpus.js';
import { Supervisor } from './supervisor.js';
import { ExitCode } from '../src/lib/exit-codes.js';
import { timerMs } from '../src/config/config.js';

const config = await prepareStart();
const logger = createLogger(config);
const supervisor = new Supervisor(config, logger, await discoverGpus(config, logger));
supervisor.start();

/** How often the supervisor looks for its parent's death. */
const PARENT_POLL_MS = 1000;

let stopping = false;
/** `signal`: the signal, or why the service stops without one. */
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  const grace = config.supervisor.shutdown_grace_ms;
  // Ctrl-C is someone at a terminal, not a balancer: no drain delay.
  const drain = signal === 'SIGINT' ? 0 : config.supervisor.drain_delay_ms;
  logger.info(
    { signal, drainMs: drain, graceMs: grace },
    'stopping: not ready first, then no new connections, finishing requests in flight',
  );
  const timer = setTimeout(
    () => {
      logger.error('grace period over; exiting with requests unfinished');
      process.exit(ExitCode.UNFINISHED);
    },
    timerMs(drain + grace + 5000),
  );
  if (drain > 0) {
    logger.info({ drainMs: drain }, 'stopping: readiness answers 503 first, so balancers take this host out');
    supervisor.drain();
    await new Promise((r) => setTimeout(r, drain));
  }
  await supervisor.stop(grace);
  clearTimeout(timer);
  logger.info('stopped');
  logger.flush();
  process.exit(ExitCode.OK);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGHUP', () => void supervisor.reload().catch((err) => logger.error({ err }, 'reload failed')));
// logrotate signals the supervisor alone (systemctl kill --kill-whom=main); the fronts write
// LOG_FILE too, so they are told (model workers log through the supervisor). Without LOG_FILE
// the handler keeps SIGUSR2 from stopping the service, as Node's default would.
process.on('SIGUSR2', () => {
  reopenLogFile();
  supervisor.reopenLogs();
});
// A parent that dies without passing a signal on (`npm start` killed with SIGKILL, a pipeline
// gone) hands the supervisor to init: stop as for SIGTERM. Linux's PR_SET_PDEATHSIG would say so
// at once, but Node reaches it only through a native addon; a changed ppid is a syscall a second.
// Under systemd the parent is PID 1 and never changes.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) void shutdown('parent exited');
}, PARENT_POLL_MS).unref();
