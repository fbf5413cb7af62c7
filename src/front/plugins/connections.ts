// Connections a front holds, and its stop: at most max_connections at once (derived from the
// open-file limit, so a flood of idle or stalled connections cannot exhaust file descriptors), and
// during a stop new requests get the service's 503 while responses in flight carry
// `Connection: close`, so keep-alive clients let go and the front can finish closing. A front
// holding more than its share of the service's connections closes them the same way, one
// response at a time, until it holds its share (connection-share.ts).
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../../lib/errors.js';
import type { ConnectionShare } from '../connection-share.js';
import { MAX_CONNECTIONS, type ServiceConfig } from '../../config/config.js';

/** Descriptors kept for everything but client connections: worker sockets, files, the IPC pipe. */
const RESERVED_FDS = 128;

/** The soft open-file limit (Node raises it to the hard limit at start), from /proc; 1024 where
 *  /proc is not there. */
export function openFileLimit(): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    return soft && /^\d+$/.test(soft) ? Number(soft) : Infinity;
  } catch {
    return 1024;
  }
}

/** The connections a front holds on each of its listeners: front.max_connections, or by default
 *  the open-file limit less RESERVED_FDS, halved between HTTP and gRPC where grpc_port is set (a
 *  flood of idle gRPC connections then leaves HTTP its half). */
export function connectionLimit(config: Pick<ServiceConfig, 'front' | 'grpc_port'>): number {
  if (config.front.max_connections) return config.front.max_connections;
  const listeners = config.grpc_port === null ? 1 : 2;
  return Math.max(16, Math.floor((Math.min(openFileLimit(), MAX_CONNECTIONS) - RESERVED_FDS) / listeners));
}

export interface ConnectionsOptions {
  /** connectionLimit's. */
  maxConnections: number;
  /** This front's share of the service's connections (none: a front alone, as tests build it). */
  share?: ConnectionShare;
}

async function connections(app: FastifyInstance, { maxConnections, share }: ConnectionsOptions): Promise<void> {
  app.server.maxConnections = maxConnections;
  app.log.debug({ maxConnections }, 'connection limit');

  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async () => {
    if (closing) throw errors.shuttingDown();
  });
  if (share) app.server.on('connection', (socket) => share.track(socket));
  app.addHook('onSend', async (request, reply, payload) => {
    if (closing || share?.shouldClose(request.raw.socket)) reply.header('connection', 'close');
    return payload;
  });
}

export default fp(connections, { name: 'connections' });
