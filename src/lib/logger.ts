// The service log: JSON lines (pino) to stdout for the journal, readable lines instead when stdout
// is a terminal (a person running `npm start`), and JSON lines to LOG_FILE when set, whose tail
// /diagnostics shows. SIGUSR2 reopens LOG_FILE, so logrotate can move it away (as nginx does).
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import pino, { type Logger } from 'pino';
import type pinoPretty from 'pino-pretty';

const require = createRequire(import.meta.url);

/** pino-pretty is loaded only for a terminal: a service under systemd never pays for it. */
function readable(out: NodeJS.WritableStream): NodeJS.WritableStream {
  const pretty = require('pino-pretty') as typeof pinoPretty;
  return pretty({
    destination: out,
    colorize: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid',
    singleLine: true,
    sync: true,
  });
}

/** The logging part of the service configuration (config.ts), named here so that lib depends on
 *  nothing of the service's. */
export interface LogSettings {
  log_file: string | null;
  log_level: pino.LevelWithSilent;
}

export function createLogger(
  config: LogSettings,
  out: NodeJS.WritableStream & { isTTY?: boolean } = process.stdout,
): Logger {
  // Every stream takes every line the logger's level lets through (multistream's default is info).
  const streams: pino.StreamEntry[] = [{ level: 'trace', stream: out.isTTY ? readable(out) : out }];
  if (config.log_file) {
    mkdirSync(dirname(config.log_file), { recursive: true });
    const file = pino.destination({ dest: config.log_file, append: true, sync: false, mkdir: true });
    process.on('SIGUSR2', () => file.reopen());
    streams.push({ level: 'trace', stream: file });
  }
  // No hostname in log lines: the log tail is shown by /diagnostics, which must not reveal it.
  return pino({ level: config.log_level, base: { pid: process.pid } }, pino.multistream(streams));
}
