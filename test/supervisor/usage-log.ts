// The usage log: a front's batch written in one piece, rotated by size within a batch, the recent
// entries kept and counted.
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { UsageLog } from '../../supervisor/usage-log.js';
import type { UsageEntry } from '../../src/ipc/protocol.js';
import { tempDir } from '../../tools/temp-dir.js';

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
