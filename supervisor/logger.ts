// The service log: JSON lines (pino) to stdout for the journal, and to LOG_FILE when set, whose
// tail /diagnostics shows.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import pino, { type Logger } from 'pino';
import type { ServiceConfig } from './config.js';

export function createLogger(config: ServiceConfig): Logger {
  const streams: pino.StreamEntry[] = [{ stream: process.stdout }];
  if (config.log_file) {
    mkdirSync(dirname(config.log_file), { recursive: true });
    streams.push({ stream: pino.destination({ dest: config.log_file, append: true, sync: false }) });
  }
  // No hostname in log lines: the log tail is shown by /diagnostics, which must not reveal it.
  return pino({ level: config.log_level, base: { pid: process.pid } }, pino.multistream(streams));
}
