// The service log: JSON lines (pino) to stdout for the journal, readable lines instead when stdout
// is a terminal (a person running `npm start`), and JSON lines to LOG_FILE when set, whose tail
// /diagnostics shows. reopenLogFile() reopens LOG_FILE, so logrotate can move it away (as nginx
// does): the supervisor calls it on SIGUSR2 and tells every front to.
// A LOG_FILE that fails after the start (its folder replaced, the disk full, a folder where the
// file was after a rotation mistake) is said once on stderr and the process serves on: every
// line still goes to stdout, and to the file again once it can be written or reopened.
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import pino, { type Logger } from 'pino';
import { CodedError, errorLine } from './errors.js';
import { WriteOutage } from './write-outage.js';
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

/** Bytes of log lines held for a file that cannot be written: past it lines are dropped (from
 *  the file only), so a full disk cannot fill the heap too. */
const FILE_BUFFER_BYTES = 16 * 1024 * 1024;

/** Reopens this process's LOG_FILE by its path (one per createLogger with a file). */
const reopeners: (() => void)[] = [];

/** After logrotate moved LOG_FILE: this process writes to a new file at its path. */
export function reopenLogFile(): void {
  for (const reopen of reopeners) reopen();
}

export function createLogger(
  config: LogSettings,
  out: NodeJS.WritableStream & { isTTY?: boolean } = process.stdout,
  errors: NodeJS.WritableStream = process.stderr,
): Logger {
  // Every stream takes every line the logger's level lets through (multistream's default is info).
  const streams: pino.StreamEntry[] = [{ level: 'trace', stream: out.isTTY ? readable(out) : out }];
  if (config.log_file) {
    mkdirSync(dirname(config.log_file), { recursive: true });
    const path = config.log_file;
    const file = pino.destination({
      dest: path,
      append: true,
      sync: false,
      mkdir: true,
      maxLength: FILE_BUFFER_BYTES,
    });
    // sonic-boom emits 'error' for a failed write or reopen; unhandled, it killed the process
    // (the supervisor, and so the service). Said once per failure, again after a reopen worked.
    // sonic-boom tries its held lines again with each new one: its end needs no word (stdout had
    // every line).
    const outage = new WriteOutage({
      failed: (err) => {
        const why = new CodedError(
          'TILE_ERR_LOG_FILE',
          `${path}: ${err.message}; serving on: lines may be missing from the file until it can be written again (SIGUSR2 reopens it), stdout has them all`,
        );
        errors.write(`logging error ${errorLine(why)}\n`);
      },
      resumed: () => {},
    });
    file.on('error', (err: Error) => outage.failed(err));
    // A reopen or a write that worked ends the failure.
    file.on('ready', () => outage.worked());
    file.on('write', () => outage.worked());
    // pino flushes the file synchronously at exit, and sonic-boom's flushSync retries any error
    // but EAGAIN forever: with a full disk the service never exited on SIGTERM. A failing file's
    // lines are not flushed (stdout has them).
    const flushSync = file.flushSync.bind(file);
    file.flushSync = () => {
      if (!outage.failing) flushSync();
    };
    reopeners.push(() => {
      // Tried here first: sonic-boom keeps the old descriptor when a reopen fails, but leaves a
      // listener that closes it at the next reopen, twice (EBADF).
      try {
        closeSync(openSync(path, 'a'));
        file.reopen();
      } catch (err) {
        file.emit('error', err);
      }
    });
    streams.push({ level: 'trace', stream: file });
  }
  // No hostname in log lines: the log tail is shown by /diagnostics, which must not reveal it.
  return pino({ level: config.log_level, base: { pid: process.pid } }, pino.multistream(streams));
}
