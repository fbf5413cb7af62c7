// Real servers for remote slides, each started on a free port with its own configuration and
// folder (no service manager): nginx (Debian's nginx-light) serving a folder with byte ranges,
// and one subfolder without them; s3rver (npm), an S3-compatible server that checks SigV4
// signatures. The tests and the benchmark read slides through them.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { tempDir } from './temp-dir.js';

export interface Started {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** A port nothing listens on now. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as { port: number };
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/** Waits until the port answers HTTP, or the process exits (a minute: s3rver loads slowly on a
 *  busy machine). */
async function listening(proc: ChildProcess, port: number, log: () => string, timeoutMs = 60000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${proc.spawnfile} exited with ${proc.exitCode}: ${log()}`);
    const ok = await fetch(`http://127.0.0.1:${port}/`).then(
      () => true,
      () => false,
    );
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${proc.spawnfile} did not listen on ${port}: ${log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function stopper(proc: ChildProcess) {
  return async () => {
    if (proc.exitCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGTERM');
    await exited;
  };
}

/** nginx serving `root`: files there with ranges (its default), and under /no-ranges/ the same
 *  files without them (max_ranges 0: a range request gets the whole file, 200). Every request is
 *  logged with its status and bytes sent (`log()`). */
export async function startNginx(root: string): Promise<Started & { log(): string[] }> {
  const prefix = tempDir('nginx');
  const port = await freePort();
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(prefix, d));
  const conf = join(prefix, 'nginx.conf');
  writeFileSync(
    conf,
    `# One process in the foreground, everything under its own prefix.
daemon off;
master_process off;
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log warn;
events { worker_connections 256; }
http {
  client_body_temp_path ${prefix}/body;
  proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fastcgi;
  uwsgi_temp_path ${prefix}/uwsgi;
  scgi_temp_path ${prefix}/scgi;
  log_format bytes '$status $body_bytes_sent $request_uri $http_range';
  access_log ${prefix}/access.log bytes;
  server {
    listen 127.0.0.1:${port};
    root ${root};
    location /no-ranges/ { alias ${root}/; max_ranges 0; }
  }
}
`,
  );
  const proc = spawn('nginx', ['-p', prefix, '-c', conf, '-e', join(prefix, 'error.log')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const errorLog = () =>
    stderr +
    (() => {
      try {
        return readFileSync(join(prefix, 'error.log'), 'utf8');
      } catch {
        return '';
      }
    })();
  await listening(proc, port, errorLog);
  const log = () => readFileSync(join(prefix, 'access.log'), 'utf8').split('\n').filter(Boolean);
  return { url: `http://127.0.0.1:${port}`, proc, log, stop: stopper(proc) };
}

/** The credentials s3rver accepts (its defaults). */
export const S3RVER_KEYS = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER' };

/** s3rver with `bucket` created, its objects in a folder of its own. Objects are put through
 *  the S3 API (s3rver's folder layout is its own). */
export async function startS3rver(bucket: string): Promise<Started & { env: NodeJS.ProcessEnv }> {
  const dir = tempDir('s3rver');
  const port = await freePort();
  const bin = createRequire(import.meta.url).resolve('s3rver/bin/s3rver.js');
  const proc = spawn(
    process.execPath,
    [
      bin,
      '-d',
      dir,
      '-a',
      '127.0.0.1',
      '-p',
      String(port),
      '--silent',
      '--no-vhost-buckets',
      '--configure-bucket',
      bucket,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  await listening(proc, port, () => out);
  const url = `http://127.0.0.1:${port}`;
  return { url, proc, env: { ...S3RVER_KEYS, AWS_ENDPOINT_URL: url, AWS_REGION: 'us-east-1' }, stop: stopper(proc) };
}
