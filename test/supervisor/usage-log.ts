// The usage log: a front's batch written in one piece, rotated by size within a batch, the recent
// entries kept and counted; a file that cannot be written (the disk full) opened again later.
import t from 'tap';
import { existsSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { UsageLog } from '../../supervisor/usage-log.js';
import type { UsageEntry } from '../../src/ipc/protocol.js';
import { tempDir } from '../../tools/temp-dir.js';
import { waitFor } from '../helpers/server.js';

const entry = (i: number): UsageEntry => ({
  timestamp: new Date(Date.UTC(2026, 10, 26, 0, 0, i)).toISOString(),
  model: 'gene-expr',
  endpoint: 'predict',
  mode: 'prediction',
  status: i % 4 ? 200 : 422,
  duration_ms: i,
  tile: '224x224',
});
const lines = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean);

t.test('a batch larger than the file size rotates inside it; no entry is lost or torn', async (t) => {
  const dir = tempDir('usage-log');
  const log = new UsageLog({ dir, maxFileBytes: 1024, recentEntries: 5, logger: pino({ enabled: false }) });
  const lineBytes = JSON.stringify(entry(10)).length + 1;
  const batch = Array.from({ length: 12 }, (_, i) => entry(10 + i));
  // The file is opened asynchronously, as at the supervisor's start, long before any request.
  while (!existsSync(log.file)) await new Promise((resolve) => setTimeout(resolve, 5));
  log.record(batch.slice(0, 3));
  log.record(batch.slice(3));
  await log.close();
  const rotated = lines(join(dir, 'usage.jsonl.1'));
  const current = lines(join(dir, 'usage.jsonl'));
  t.same(
    [...rotated, ...current].map((l) => JSON.parse(l)),
    batch,
    'every entry once, in order, across the two files',
  );
  t.equal(rotated.length, Math.floor(1024 / lineBytes), 'the rotated file filled to its size and no further');
  t.same(
    log.recent().map((e) => e.duration_ms),
    [17, 18, 19, 20, 21],
    'the most recent entries, newest last',
  );
  t.same(log.summary().find((s) => s.status === 422)?.count, 3, 'counted by status');
});

t.test('a full disk: said once, entries dropped and counted, recording resumes once it can write', async (t) => {
  const dir = tempDir('usage-log');
  const file = join(dir, 'usage.jsonl');
  // Every write to /dev/full fails with ENOSPC, as on a full disk; the log opens its file by path.
  symlinkSync('/dev/full', file);
  const said: { msg: string; dropped?: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => said.push(JSON.parse(line)) });
  const retryMs = 300;
  const log = new UsageLog({ dir, maxFileBytes: 1 << 20, recentEntries: 100, logger, retryMs });
  log.record([entry(0), entry(1)]);
  await waitFor(() => said.length > 0);
  for (let i = 2; i < 5; i++) log.record([entry(i)]);
  t.match(said, [{ msg: /^usage log write failed; .* dropped \(counted\) until it can be written again$/ }]);
  t.equal(said.length, 1, 'said once');
  unlinkSync(file); // space freed
  log.record([entry(5)]);
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.notOk(existsSync(file), 'not tried again before retryMs');
  await new Promise((resolve) => setTimeout(resolve, retryMs));
  log.record([entry(6), entry(7)]);
  await waitFor(() => said.length === 2);
  log.record([entry(8)]);
  await log.close();
  t.match(said[1], { msg: 'usage log recording resumes', dropped: 6 });
  t.equal(said.length, 2, 'resuming said once');
  t.same(
    lines(file).map((l) => JSON.parse(l).duration_ms),
    [6, 7, 8],
    'recorded again',
  );
  t.equal(log.recent().length, 9, 'every entry counted and kept in memory meanwhile');
});

t.test('a line cut short by a full disk is ended before the next entry', async (t) => {
  const dir = tempDir('usage-log');
  const file = join(dir, 'usage.jsonl');
  writeFileSync(file, `${JSON.stringify(entry(0))}\n{"timestamp":"2026-11`);
  const log = new UsageLog({ dir, maxFileBytes: 1 << 20, recentEntries: 100, logger: pino({ enabled: false }) });
  log.record([entry(1)]);
  await log.close();
  t.same(
    lines(file)
      .slice(-1)
      .map((l) => JSON.parse(l).duration_ms),
    [1],
  );
});
