// Type=notify: the service tells systemd READY=1 once every front listens and every model has
// settled, and STOPPING=1 when it stops. systemd-notify is replaced by a script that records its
// arguments (no systemd runs here); NOTIFY_SOCKET is what makes the service speak at all.
import t from 'tap';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from '../helpers/server.js';
import { corruptPackage } from '../helpers/packages.js';
import { tempDir } from '../../tools/temp-dir.js';

function fakeSystemdNotify(): { bin: string; calls: () => string[] } {
  const bin = tempDir('notify');
  const log = join(bin, 'calls');
  writeFileSync(join(bin, 'systemd-notify'), `#!/bin/sh\necho "$@" >> ${log}\n`, { mode: 0o755 });
  return { bin, calls: () => (existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : []) };
}

t.test('READY=1 after every front listens and every model settles; STOPPING=1 on SIGTERM', async (t) => {
  const notify = fakeSystemdNotify();
  const server = await startServer({
    models: [{ name: 'tile-embed' }, { name: 'tissue-seg', path: corruptPackage('tissue-seg') }],
    config: { fronts: 2 },
    env: { PATH: `${notify.bin}:${process.env.PATH}`, NOTIFY_SOCKET: '/run/fake-notify' },
    waitReady: false,
  });
  await server.waitFor(() => notify.calls().length > 0, 60000);
  const [ready] = notify.calls();
  t.match(
    ready,
    /^--pid=\d+ READY=1 STATUS=serving 1 of 2 models; failed: tissue-seg$/,
    'ready, saying what is served and what failed',
  );
  t.equal((await server.post('/api/embed/tile-embed', '{}')).status, 422, 'answering when it says so');
  t.equal(await server.stop(), 0);
  t.match(notify.calls().at(-1), /STOPPING=1/);
});

t.test('without NOTIFY_SOCKET nothing is sent', async (t) => {
  const notify = fakeSystemdNotify();
  const server = await startServer({
    models: [{ name: 'tile-embed' }],
    env: { PATH: `${notify.bin}:${process.env.PATH}` },
  });
  await server.stop();
  t.same(notify.calls(), []);
});
