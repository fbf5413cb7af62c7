// `npm start`: the supervisor process. Forks the workers, serves HTTP, and handles signals:
// SIGTERM/SIGINT stop gracefully, SIGHUP reloads the model packages one worker at a time.
import { prepareStart } from './cli.js';
import { createLogger } from './logger.js';
import { Supervisor, discoverGpus } from './supervisor.js';
import { buildApp } from '../src/http/app.js';

const config = await prepareStart();
const logger = createLogger(config);
const supervisor = new Supervisor(config, logger, await discoverGpus(config, logger));
const app = await buildApp({ config, supervisor, logger });
supervisor.start();
await app.listen({ host: config.host, port: config.port });

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  const grace = config.supervisor.shutdown_grace_ms;
  logger.info({ signal, graceMs: grace }, 'stopping: no new connections, finishing requests in flight');
  const timer = setTimeout(() => {
    logger.error('grace period over; exiting with requests unfinished');
    process.exit(1);
  }, grace + 5000);
  await app.close();
  await supervisor.stop(grace);
  clearTimeout(timer);
  logger.info('stopped');
  logger.flush();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGHUP', () => void supervisor.reload().catch((err) => logger.error({ err }, 'reload failed')));
