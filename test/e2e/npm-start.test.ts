// `npm start` as the README runs it: whatever stops the npm process stops the whole service
// (supervisor, fronts, workers), and a supervisor whose parent dies without passing a signal on
// (SIGKILL) stops by itself.
import t from 'tap';
import { startServer } from '../helpers/server.js';
import { alive } from '../helpers/procs.js';

for (const signal of ['SIGTERM', 'SIGINT', 'SIGKILL'] as const) {
  t.test(`${signal} to the npm start process stops the service`, async (t) => {
    const server = await startServer({ models: [{ name: 'tissue-seg' }], npmStart: true });
    await server.waitFor(() => server.lines.some((l) => l.msg === 'service ready'));
    const pid = (msg: string, key = 'pid') => server.lines.filter((l) => l.msg === msg).map((l) => l[key] as number);
    const service = [
      ...pid('service ready'),
      ...pid('worker ready', 'workerPid'),
      ...server.lines.filter((l) => /Server listening/.test(String(l.msg))).map((l) => l.pid as number),
    ];
    t.equal(service.length, 3, 'supervisor, front and worker');
    const npm = server.proc.pid!;
    t.teardown(() => [npm, ...service].filter(alive).forEach((p) => process.kill(p, 'SIGKILL')));
    void server.stop(signal);
    await server.waitFor(() => ![npm, ...service].some(alive), 20000).catch(() => {});
    t.same(service.filter(alive), [], 'no process of the service left');
    t.notOk(alive(npm), 'npm exited');
    t.ok(
      server.lines.some((l) => l.msg === 'stopped'),
      'a graceful stop',
    );
  });
}
