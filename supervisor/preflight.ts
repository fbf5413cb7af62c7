// Before any worker forks: can the service listen where it is told to? An unresolvable HOST or a
// port in use becomes one line naming the setting, the value and what was expected, instead of a
// stack trace after the workers have started.
import { lookup } from 'node:dns/promises';
import { createServer } from 'node:net';
import { ConfigError, settingSource, type ServiceConfig } from '../src/config/config.js';
import type { CodesOf } from '../src/lib/errors.js';

const REASONS: Record<string, { code: CodesOf<'LISTEN'>; reason: string }> = {
  EADDRINUSE: {
    code: 'TILE_ERR_LISTEN_PORT_IN_USE',
    reason: 'is already in use by another process, expected a free port (or PORT=0 for any)',
  },
  EACCES: {
    code: 'TILE_ERR_LISTEN_PORT_DENIED',
    reason: 'needs privileges (ports below 1024 need root or CAP_NET_BIND_SERVICE), expected a port from 1024 to 65535',
  },
  EADDRNOTAVAIL: {
    code: 'TILE_ERR_LISTEN_HOST',
    reason: 'is not an address of this machine, expected one of its addresses (127.0.0.1, 0.0.0.0, ...)',
  },
};

function tryListen(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve()));
  });
}

/** Resolves the host and binds, then releases, each address fastify will listen on. */
export async function checkListenAddress(config: ServiceConfig, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const host = settingSource('host', env);
  let addresses: { address: string }[];
  try {
    addresses = await lookup(config.host, { all: true });
  } catch (err) {
    throw new ConfigError(
      'TILE_ERR_LISTEN_HOST',
      `${host} is ${JSON.stringify(config.host)}, which does not resolve (${(err as NodeJS.ErrnoException).code}), expected an IP address or a hostname of this machine`,
    );
  }
  // HTTP's port, and gRPC's when it is on.
  const ports = [
    ['port', config.port],
    ...(config.grpc_port !== null ? [['grpc_port', config.grpc_port] as const] : []),
  ] as const;
  for (const { address } of addresses) {
    for (const [field, port] of ports) {
      try {
        await tryListen(address, port);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'error';
        const known = REASONS[code] ?? {
          code: 'TILE_ERR_LISTEN_FAILED',
          reason: `cannot be listened on (${code}: ${(err as Error).message})`,
        };
        const subject =
          code === 'EADDRNOTAVAIL'
            ? `${host} is ${JSON.stringify(config.host)} (${address}), which`
            : `${settingSource(field, env)} is ${port} on ${address}, which`;
        throw new ConfigError(known.code, `${subject} ${known.reason}`);
      }
    }
  }
}
