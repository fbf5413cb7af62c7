// Before any worker forks: can the service listen where it is told to, and write its log file and
// usage log? An unresolvable HOST, a port in use or a log_file that is a folder becomes one line
// naming the setting, the value and what was expected, instead of a stack trace after the workers
// have started.
import { accessSync, constants, statSync, type Stats } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { createServer } from 'node:net';
import { dirname } from 'node:path';
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
  // dns.lookup('') answers no address (and a deprecation warning), so nothing was bound here and
  // fastify then listened on every interface. The schema refuses it; this keeps the check whole.
  if (!config.host.trim())
    throw new ConfigError(
      'TILE_ERR_LISTEN_HOST',
      `${host} is ${JSON.stringify(config.host)}, which names no address, expected an IP address or a hostname of this machine (0.0.0.0 or :: for every interface)`,
    );
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

const canAccess = (path: string, mode: number): boolean => {
  try {
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
};

/** Why `path` cannot be written as a file or a folder (missing folders are created, as the
 *  logger and the usage log do), or undefined when it can. Reads only: --check-config creates
 *  nothing. */
function unwritable(path: string, kind: 'file' | 'folder'): string | undefined {
  const stat = (p: string): Stats | undefined => statSync(p, { throwIfNoEntry: false });
  const found = stat(path);
  if (found?.isDirectory() === (kind === 'file')) return kind === 'file' ? 'a folder' : 'not a folder';
  if (found)
    return canAccess(path, kind === 'file' ? constants.W_OK : constants.W_OK | constants.X_OK)
      ? undefined
      : 'not writable by this user';
  let parent = dirname(path);
  let above = stat(parent);
  while (!above && parent !== dirname(parent)) above = stat((parent = dirname(parent)));
  if (!above?.isDirectory()) return `under ${parent}, which is not a folder`;
  return canAccess(parent, constants.W_OK | constants.X_OK)
    ? undefined
    : `under ${parent}, where this user cannot create it`;
}

/** log_file and data_dir: the logger opens the one (a failure killed the supervisor with a
 *  stack trace) and the usage log writes in the other (requests went unrecorded). */
export function checkPaths(config: ServiceConfig, env: NodeJS.ProcessEnv = process.env): ConfigError[] {
  const paths = [
    ...(config.log_file ? [['log_file', config.log_file, 'file'] as const] : []),
    ['data_dir', config.data_dir, 'folder'] as const,
  ];
  return paths.flatMap(([field, path, kind]) => {
    const why = unwritable(path, kind);
    return why
      ? [
          new ConfigError(
            'TILE_ERR_CONFIG_PATH',
            `${settingSource(field, env)} is ${JSON.stringify(path)}, ${why}, expected a ${kind} this user can write (or a path where one can be created)`,
          ),
        ]
      : [];
  });
}
