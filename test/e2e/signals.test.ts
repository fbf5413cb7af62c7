// Signals sent to every process of the service, as `kill -SIG -PGID` or `systemctl kill` without
// --kill-whom=main do: SIGUSR2 (logrotate's reopen) stopped each worker by Node's default, every
// model answering 503 until it had loaded again; with no LOG_FILE it stopped the whole service.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { spawnService, waitFor } from '../../tools/service-process.js';
import { MODELS } from '../helpers/server.js';

/** The service's processes: the supervisor and every process under it. */
function tree(pid: number): number[] {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return [pid, ...children.flatMap((c) => tree(Number(c)))];
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

for (const logFile of [true, false])
  t.test(
    `SIGUSR2 to every process, ${logFile ? 'with' : 'without'} LOG_FILE: all of them live on, serving`,
    async (t) => {
      const service = await spawnService(
        { model_repository: MODELS, fronts: 1, models: [{ name: 'tissue-seg', gpus: [], instances: 2 }] },
        logFile ? {} : { env: { LOG_FILE: '' } },
      );
      t.teardown(() => service.proc.kill('SIGKILL'));
      const ready = async () => (await fetch(`${service.url}/health/ready`)).status === 200;
      await waitFor(ready, 120000);
      const processes = tree(service.proc.pid!);
      t.ok(processes.length >= 4, `${processes.length} processes: supervisor, front and two workers`);
      for (const pid of processes) process.kill(pid, 'SIGUSR2');
      await new Promise((r) => setTimeout(r, 1500));
      t.same(
        processes.filter((pid) => !alive(pid)),
        [],
        'none stopped',
      );
      t.ok(await ready(), 'still ready');
      t.notOk(
        service.lines.some((l) => /exited|restart/i.test(String(l.msg))),
        'no worker exited or was restarted',
      );
      service.proc.kill('SIGTERM');
      t.equal(await service.exited, 0, 'stops cleanly');
    },
  );
