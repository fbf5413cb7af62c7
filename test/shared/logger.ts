// The service log: LOG_LEVEL honoured on every stream, readable lines on a terminal, JSON lines
// otherwise, and LOG_FILE reopened after logrotate moved it (the supervisor's SIGUSR2:
// test/e2e/log-file-failure.test.ts).
import t from 'tap';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { createLogger, reopenLogFile } from '../../src/lib/logger.js';
import { waitFor } from '../helpers/server.js';
import { tempDir } from '../../tools/temp-dir.js';

function capture(isTTY: boolean): { out: PassThrough & { isTTY?: boolean }; text: () => string } {
  const out: PassThrough & { isTTY?: boolean } = new PassThrough();
  out.isTTY = isTTY;
  let text = '';
  out.on('data', (d) => (text += d));
  return { out, text: () => text };
}

t.test('JSON lines for the journal, at the configured level', async (t) => {
  const { out, text } = capture(false);
  const logger = createLogger({ log_file: null, log_level: 'debug' }, out);
  logger.debug({ model: 'gene-expr' }, 'batch formed');
  logger.trace('not at debug');
  logger.info('the last line');
  await waitFor(() => text().includes('the last line'));
  const lines = text()
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.match(lines, [{ level: 20, model: 'gene-expr', msg: 'batch formed' }]);
  t.same(
    lines.map((l) => l.msg),
    ['batch formed', 'the last line'],
    'the trace line is left out',
  );
});

t.test('readable lines on a terminal', async (t) => {
  const { out, text } = capture(true);
  const logger = createLogger({ log_file: null, log_level: 'info' }, out);
  logger.info({ model: 'gene-expr', instance: 0 }, 'worker ready');
  await waitFor(() => text().includes('worker ready'));
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips the terminal colours (ESC [ ... m)
  const line = text().replace(/\x1b\[[0-9;]*m/g, '');
  t.match(line, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: worker ready \{"model":"gene-expr","instance":0\}\n$/);
});

t.test('LOG_FILE is reopened after logrotate moved it', async (t) => {
  const file = join(tempDir('log'), 'service.log');
  const logger = createLogger({ log_file: file, log_level: 'info' }, capture(false).out);
  logger.info('before rotation');
  await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').includes('before rotation'));
  renameSync(file, `${file}.1`);
  reopenLogFile();
  await waitFor(() => existsSync(file));
  logger.info('after rotation');
  await waitFor(() => readFileSync(file, 'utf8').includes('after rotation'));
  t.notMatch(readFileSync(file, 'utf8'), /before rotation/);
  t.notMatch(readFileSync(`${file}.1`, 'utf8'), /after rotation/, 'the rotated file is left alone');
});

t.test('a LOG_FILE that cannot be written is said once, and logging goes on (the disk full)', async (t) => {
  const { out, text } = capture(false);
  const errors = capture(false);
  // Every write to /dev/full fails with ENOSPC; sonic-boom's unhandled 'error' killed the process.
  const logger = createLogger({ log_file: '/dev/full', log_level: 'info' }, out, errors.out);
  for (let i = 0; i < 3; i++) {
    logger.info(`line ${i}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await waitFor(() => errors.text().includes('TILE_ERR_LOG_FILE') && text().includes('line 2'));
  await new Promise((r) => setTimeout(r, 50));
  t.match(
    errors.text(),
    /^logging error \[TILE_ERR_LOG_FILE\] \/dev\/full: ENOSPC: .*; serving on: lines may be missing from the file until it can be written again \(SIGUSR2 reopens it\), stdout has them all\n$/,
    'one line, once',
  );
});

t.test(
  'a LOG_FILE whose folder was replaced by one with a folder at its path: said once, reopened later',
  async (t) => {
    const root = tempDir('log');
    const logs = join(root, 'logs');
    const file = join(logs, 'service.log');
    const { out, text } = capture(false);
    const errors = capture(false);
    const logger = createLogger({ log_file: file, log_level: 'info' }, out, errors.out);
    logger.info('before');
    await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').includes('before'));
    renameSync(logs, `${logs}.old`);
    mkdirSync(file, { recursive: true });
    reopenLogFile();
    await waitFor(() => errors.text().includes('TILE_ERR_LOG_FILE'));
    t.match(errors.text(), /^logging error \[TILE_ERR_LOG_FILE\] \S+\/logs\/service\.log: EISDIR: /);
    logger.info('while it cannot be reopened');
    await waitFor(() => text().includes('while it cannot be reopened'));
    // The mistake undone: the next reopen works.
    rmSync(file, { recursive: true });
    reopenLogFile();
    await waitFor(() => existsSync(file));
    logger.info('after');
    await waitFor(() => readFileSync(file, 'utf8').includes('after'));
    t.equal(errors.text().split('\n').filter(Boolean).length, 1, `said once: ${errors.text()}`);
  },
);
