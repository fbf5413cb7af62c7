// The systemd units parse cleanly (systemd-analyze verify) and carry the hardening we promise.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from '../helpers/server.js';
import { tempDir } from '../../tools/temp-dir.js';

const units = join(ROOT, 'systemd');

/** systemd-analyze verify exits 0 even for unknown keys; anything it prints is a finding. */
function verify(file: string): string {
  const result = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8', cwd: tmpdir() });
  if (result.error) throw result.error;
  return `${result.stdout}${result.stderr}`.trim() + (result.status ? ` (exit ${result.status})` : '');
}

t.test('systemd-analyze is installed (.ci/run installs Debian systemd)', async (t) => {
  t.doesNotThrow(() => execFileSync('systemd-analyze', ['--version']));
});

t.test('the units verify without findings', async (t) => {
  const dir = tempDir('units');
  copyFileSync(join(units, 'tile-inference.service'), join(dir, 'tile-inference.service'));
  copyFileSync(join(units, 'tile-inference@.service'), join(dir, 'tile-inference@gpu0.service'));
  t.equal(verify(join(dir, 'tile-inference.service')), '');
  t.equal(verify(join(dir, 'tile-inference@gpu0.service')), '');
  const broken = readFileSync(join(units, 'tile-inference.service'), 'utf8').replace(
    'KillMode=mixed',
    'KillMode=gently',
  );
  writeFileSync(join(dir, 'broken.service'), broken);
  t.match(verify(join(dir, 'broken.service')), /kill mode/, 'a broken unit is caught');
});

t.test('restart policy, hardening, GPU devices, user and environment file', async (t) => {
  for (const name of ['tile-inference.service', 'tile-inference@.service']) {
    const unit = readFileSync(join(units, name), 'utf8');
    for (const line of [
      'Restart=on-failure',
      'StartLimitIntervalSec=300',
      'StartLimitBurst=5',
      'KillMode=mixed',
      'Type=notify',
      'NotifyAccess=all',
      'ExecReload=/bin/kill -HUP $MAINPID',
      'NoNewPrivileges=yes',
      'ProtectSystem=strict',
      'ProtectHome=yes',
      'PrivateTmp=yes',
      'DevicePolicy=closed',
      'DeviceAllow=char-nvidia-frontend rw',
      'User=tile-inference',
      'StandardOutput=journal',
    ]) {
      t.ok(unit.split('\n').includes(line), `${name}: ${line}`);
    }
    t.match(
      unit,
      /^ReadWritePaths=\/var\/lib\/tile-inference\S* \/var\/log\/tile-inference\S*$/m,
      `${name}: writable only for data and logs`,
    );
    t.match(unit, /^EnvironmentFile=-?\/etc\/tile-inference\/\S+\.env$/m, `${name}: environment file`);
  }
});
