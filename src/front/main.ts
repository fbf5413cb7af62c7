// An HTTP front: a node:cluster worker of the supervisor, serving the HTTP API on the shared port.
// It reads, checks and answers requests and sends tiles to model workers over their sockets; it
// never runs a model and owns no process. Told by the supervisor (TILE_FRONT, then messages).
import process from 'node:process';
import { createLogger, reopenLogFile } from '../lib/logger.js';
import type { FromFront, ToFront } from '../ipc/protocol.js';
import { buildApp } from './app.js';
import { ConnectionShare } from './connection-share.js';
import { ExitCode } from '../lib/exit-codes.js';
import { readFrontConfig } from '../ipc/fork-config.js';
import { ModelClient } from './model-client.js';
import { V2Service } from './v2/v2-service.js';
import { startGrpc } from './v2/grpc-server.js';
import { connectionLimit } from './plugins/connections.js';
import { warnUnreachableHeap } from './plugins/pressure.js';

const { service: config, index, fronts } = readFrontConfig();
const logger = createLogger(config).child({ front: index });
const client = new ModelClient(config, fronts, (message, written) =>
  process.send!(message, undefined, undefined, written),
);
const connectionShare = new ConnectionShare((open) => process.send!({ type: 'connections', open } satisfies FromFront));
const app = await buildApp({ config, backend: client, logger, connectionShare });
// Said once, not by every front: they share their flags, so their heap limit.
if (index === 0) warnUnreachableHeap(config.pressure, logger);

/** How long a stopping front waits for its last usage entries to be written to the supervisor. */
const FLUSH_WAIT_MS = 1000;

let stopping = false;
/** The gRPC server, once it listens. */
let grpc: Awaited<ReturnType<typeof startGrpc>> | null = null;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  // Stops accepting; requests in flight finish (plugins/connections.ts asks keep-alive clients to go).
  await Promise.all([
    app.close(),
    new Promise<void>((resolve) => (grpc ? grpc.server.tryShutdown(() => resolve()) : resolve())),
  ]);
  // process.exit drops IPC writes still queued: the last usage entries are waited for (briefly:
  // a supervisor that reads nothing more is stopping anyway).
  await Promise.race([client.flushUsage(), new Promise((resolve) => setTimeout(resolve, FLUSH_WAIT_MS))]);
  logger.flush();
  process.exit(ExitCode.OK);
}

process.on('message', (message: ToFront) => {
  if (message.type === 'stop') return void stop();
  if (message.type === 'reopen-log') return reopenLogFile();
  if (message.type === 'drain') logger.info('draining: readiness answers 503; requests are still served');
  if (message.type === 'connections') return connectionShare.update(message.total, message.fronts);
  client.onMessage(message);
});
// The supervisor is gone (killed): nobody restarts the workers we route to.
process.on('disconnect', () => process.exit(ExitCode.OK));
// Signals reach the whole process group; the supervisor coordinates the stop, the reload and the
// log file's reopening (SIGUSR2).
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGUSR2'] as const) process.on(signal, () => {});
process.send!({ type: 'hello' });
await app.listen({ host: config.host, port: config.port });
// The Open Inference Protocol's gRPC service, beside HTTP when grpc_port is set.
grpc =
  config.grpc_port === null
    ? null
    : await startGrpc(new V2Service(client, config), {
        host: config.host,
        port: config.grpc_port,
        maxMessageBytes: config.body_limit_bytes,
        maxInflightBytes: config.front.max_inflight_bytes,
        headersTimeoutMs: config.front.headers_timeout_ms,
        bodyTimeoutMs: config.front.body_timeout_ms,
        maxConnections: connectionLimit(config),
        idleMs: config.front.keep_alive_timeout_ms,
        logger,
        record: (call) => {
          app.recordModelRequest(call.model, 'grpc', call.status, call.ms / 1000, call.shed);
          app.recordGrpcUsage(call);
        },
      });
if (grpc && index === 0)
  logger.info({ grpcPort: grpc.port }, `gRPC (inference.GRPCInferenceService) on ${config.host}:${grpc.port}`);
process.send!({ type: 'listening' });
