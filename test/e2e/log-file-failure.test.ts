// LOG_FILE after the start. logrotate's way (moved, then SIGUSR2 to the supervisor alone): every
// process that writes it reopens it; the fronts used to keep writing the rotated file. And a
// LOG_FILE that cannot be written after the start (its folder replaced with a folder where the
// file was, the disk full): the supervisor says so once on stderr with TILE_ERR_LOG_FILE and
// serves on; it used to die of sonic-boom's unhandled 'error' (the folder), or never exit on
// SIGTERM (the full disk: pino's exit flush retried the write forever).
import t from 'tap';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { spawnService, waitFor } from '../../tools/service-process.js';
import { MODELS } from '../helpers/server.js';
import { tempDir } from '../../tools/temp-dir.js';

const config = {
  model_repository: MODELS,
  fronts: 1,
  models: [{ name: 'tissue-seg', gpus: [] }],
  supervisor: { drain_delay_ms: 0 },
};
const fileLines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { front?: number; msg: string });

t.test('moved by logrotate, then SIGUSR2 to the supervisor alone: the fronts write the new file too', async (t) => {
  const file = join(tempDir('logs'), 'service.log');
  const service = await spawnService(
    { ...config, fronts: 2, supervisor: { drain_delay_ms: 300 } },
    { env: { LOG_FILE: file } },
  );
  t.teardown(() => service.proc.kill('SIGKILL'));
  // Every front listens (one answering ready is not enough).
  await waitFor(() => service.lines.some((l) => l.msg === 'service ready'), 120000);
  renameSync(file, `${file}.1`);
  service.proc.kill('SIGUSR2');
  await waitFor(() => existsSync(file));
  // Each front logs as it drains, after the message to reopen (one channel, in order).
  service.proc.kill('SIGTERM');
  t.equal(await service.exited, 0, 'stops cleanly');
  const draining = (f: string) =>
    fileLines(f)
      .filter((l) => l.msg.startsWith('draining'))
      .map((l) => l.front)
      .sort();
  t.same(draining(file), [0, 1], "both fronts' lines in the new file");
  t.same(draining(`${file}.1`), [], 'none in the rotated one');
  t.ok(
    fileLines(file).some((l) => l.msg === 'stopped'),
    "the supervisor's too",
  );
});

const saidOnce = (stderr: string) => stderr.split('\n').filter((l) => l.includes('TILE_ERR_LOG_FILE'));

t.test('the log folder replaced, then SIGUSR2: said once, serving on, reopened when fixed', async (t) => {
  const logs = join(tempDir('logs'), 'logs');
  const file = join(logs, 'service.log');
  const service = await spawnService(config, { env: { LOG_FILE: file } });
  t.teardown(() => service.proc.kill('SIGKILL'));
  const ready = async () => (await fetch(`${service.url}/health/ready`)).status === 200;
  await waitFor(ready, 120000);
  await waitFor(() => readFileSync(file, 'utf8').includes('worker ready'));
  renameSync(logs, `${logs}.old`);
  mkdirSync(file, { recursive: true });
  service.proc.kill('SIGUSR2');
  // By each process that writes the file: the supervisor and its front.
  await waitFor(() => saidOnce(service.stderr()).length === 2);
  // Lines logged while the file cannot be reopened: a SIGHUP reload logs a few.
  service.proc.kill('SIGHUP');
  await waitFor(() => service.lines.some((l) => /reload/i.test(String(l.msg))));
  t.ok(await ready(), 'still ready');
  const eisdir = /^logging error \[TILE_ERR_LOG_FILE\] \S+\/logs\/service\.log: EISDIR: /;
  t.match(saidOnce(service.stderr()), [eisdir, eisdir]);
  rmSync(file, { recursive: true });
  service.proc.kill('SIGUSR2');
  await new Promise((r) => setTimeout(r, 500));
  service.proc.kill('SIGHUP');
  await waitFor(() => readFileSync(file, 'utf8').includes('reload'));
  t.equal(saidOnce(service.stderr()).length, 2, 'said once by each');
  service.proc.kill('SIGTERM');
  t.equal(await service.exited, 0, 'stops cleanly');
});

t.test('a full disk (LOG_FILE=/dev/full): said once, serving, and SIGTERM still stops it', async (t) => {
  const service = await spawnService(config, { env: { LOG_FILE: '/dev/full' } });
  t.teardown(() => service.proc.kill('SIGKILL'));
  await waitFor(async () => (await fetch(`${service.url}/health/ready`)).status === 200, 120000);
  t.equal((await fetch(`${service.url}/health/live`)).status, 200);
  t.match(saidOnce(service.stderr()), [/^logging error \[TILE_ERR_LOG_FILE\] \/dev\/full: ENOSPC: /]);
  service.proc.kill('SIGTERM');
  const code = await Promise.race([service.exited, new Promise((r) => setTimeout(() => r('hung'), 20000))]);
  t.equal(code, 0, 'exits on SIGTERM');
});
