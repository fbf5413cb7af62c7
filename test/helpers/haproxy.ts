// A real HAProxy (Debian's haproxy package) running the repository's deploy/haproxy/haproxy.cfg,
// pointed at test hosts through the environment variables the file reads, with its stats CSV.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, waitFor } from './server.js';
import { tempDir } from '../../tools/temp-dir.js';

export const HAPROXY_CFG = join(ROOT, 'deploy/haproxy/haproxy.cfg');

export interface BalancerOptions {
  port: number;
  statsPort: number;
  /** host1, host2, ... in the file, in this order. */
  hosts: string[];
  /** Check interval, confirmation interval, slowstart (HAProxy time units). */
  checkInter: string;
  checkFastInter: string;
  slowstart: string;
}

export interface Balancer {
  url: string;
  proc: ChildProcess;
  /** Every line HAProxy logged (server state changes). */
  log: string[];
  /** The stats CSV: one row per "backend/server", columns by name (status, stot, chkdown...). */
  stats(): Promise<Map<string, Record<string, string>>>;
  /** Waits until `server` has `status` (UP, DOWN) in each of `backends`. */
  waitServer(server: string, backends: string[], status: string, timeoutMs?: number): Promise<void>;
  /** Resident memory of the HAProxy process, bytes. */
  rss(): number;
  stop(): Promise<void>;
}

export async function startBalancer(options: BalancerOptions): Promise<Balancer> {
  const dir = tempDir('haproxy');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TILE_LB_BIND: `127.0.0.1:${options.port}`,
    TILE_LB_STATS_BIND: `127.0.0.1:${options.statsPort}`,
    TILE_LB_STATS_SOCKET: join(dir, 'admin.sock'),
    TILE_LB_CHECK_INTER: options.checkInter,
    TILE_LB_CHECK_FASTINTER: options.checkFastInter,
    TILE_LB_SLOWSTART: options.slowstart,
    TILE_LB_LOG_LEVEL: 'info',
    ...Object.fromEntries(options.hosts.map((address, i) => [`TILE_HOST${i + 1}`, address])),
  };
  // -db: stay in the foreground, one process, logs to stdout.
  const proc = spawn('haproxy', ['-db', '-f', HAPROXY_CFG], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  const collect = (d: Buffer) => log.push(...d.toString().split('\n').filter(Boolean));
  proc.stdout!.on('data', collect);
  proc.stderr!.on('data', collect);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const statsUrl = `http://127.0.0.1:${options.statsPort}/;csv`;

  const stats = async () => {
    const [header, ...rows] = (await (await fetch(statsUrl)).text()).trim().split('\n');
    const names = header.replace(/^# /, '').split(',');
    return new Map(
      rows.map((line) => {
        const row = Object.fromEntries(line.split(',').map((v, i) => [names[i], v]));
        return [`${row.pxname}/${row.svname}`, row];
      }),
    );
  };
  await waitFor(async () => {
    if (proc.exitCode !== null) throw new Error(`haproxy exited with ${proc.exitCode}: ${log.join('\n')}`);
    return stats().then(
      () => true,
      () => false,
    );
  }, 10000);

  return {
    url: `http://127.0.0.1:${options.port}`,
    proc,
    log,
    stats,
    async waitServer(server, backends, status, timeoutMs = 30000) {
      await waitFor(async () => {
        const all = await stats();
        return backends.every((b) => all.get(`${b}/${server}`)?.status === status);
      }, timeoutMs);
    },
    rss: () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'))![1]) * 1024,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}
