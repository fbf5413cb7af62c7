// The service log: LOG_LEVEL honoured on every stream, readable lines on a terminal, JSON lines
// otherwise, and LOG_FILE reopened on SIGUSR2 after logrotate moved it.
import t from 'tap';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { createLogger } from '../../src/lib/logger.js';
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

t.test('LOG_FILE is reopened on SIGUSR2 (logrotate)', async (t) => {
  const file = join(tempDir('log'), 'service.log');
  const logger = createLogger({ log_file: file, log_level: 'info' }, capture(false).out);
  logger.info('before rotation');
  await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').includes('before rotation'));
  renameSync(file, `${file}.1`);
  process.kill(process.pid, 'SIGUSR2');
  await waitFor(() => existsSync(file));
  logger.info('after rotation');
  await waitFor(() => readFileSync(file, 'utf8').includes('after rotation'));
  t.notMatch(readFileSync(file, 'utf8'), /before rotation/);
  t.notMatch(readFileSync(`${file}.1`, 'utf8'), /after rotation/, 'the rotated file is left alone');
});
