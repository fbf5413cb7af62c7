// `npm start`: the supervisor process. Forks the workers, serves HTTP, and handles signals:
// SIGTERM drains (readiness 503) then stops gracefully, SIGINT stops gracefully, SIGHUP reloads
// the model packages one worker at a time.
import { ConfigError, loadConfig, type ServiceConfig } from './config.js';
import { createLogger } from './logger.js';
import { Supervisor, discoverGpus } from './supervisor.js';
import { buildApp } from '../src/http/app.js';

let config: ServiceConfig;
try {
  config = loadConfig();
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  console.error(`configuration error: ${err.message}`);
  process.exit(2);
}
const logger = createLogger(config);
const supervisor = new Supervisor(config, logger, await discoverGpus(config, logger));
const app = await buildApp({ config, supervisor, logger });
supervisor.start();
await app.listen({ host: config.host, port: config.port });

let stopping = false;
/** `drainMs`: how long readiness reports 503 (draining) while the service still serves, before
 *  it stops accepting; SIGTERM drains for supervisor.drain_delay_ms, SIGINT stops at once. */
async function shutdown(signal: string, drainMs = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (drainMs > 0) {
    supervisor.draining = true;
    logger.info({ signal, drainDelayMs: drainMs }, 'draining: readiness reports 503 so balancers take this host out');
    await new Promise((resolve) => setTimeout(resolve, drainMs));
  }
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
process.on('SIGTERM', () => void shutdown('SIGTERM', config.supervisor.drain_delay_ms));
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGHUP', () => void supervisor.reload().catch((err) => logger.error({ err }, 'reload failed')));
