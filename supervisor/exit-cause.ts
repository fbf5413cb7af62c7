// Why a worker process ended, decided in one place: from what the life cycle knew before the exit
// (its verdict) and what the OS reports. Everything else (the error shown, whether requests in
// flight were innocent, the exit record) reads the cause, never the text of a reason.
import type { ErrorCode } from '../src/lib/errors.js';

/** What the life cycle learnt before the process exited: it reported a device fault, it reported
 *  that its package cannot load, or the life cycle killed it for hanging. */
export type Verdict =
  | { kind: 'device-fault'; reason: string }
  | { kind: 'load-failed'; reason: string; code: ErrorCode }
  | { kind: 'hung'; reason: string };

export type ExitCause =
  | Verdict
  /** Asked to stop (a reload, the service stopping). */
  | { kind: 'stopped' }
  /** Ended by a signal the service never sends: an operator, the OOM killer. */
  | { kind: 'external'; signal: string }
  /** Anything else: an exit code or a signal of its own (a crash). */
  | { kind: 'crashed'; code: number | null; signal: string | null };

/** Signals the service never sends itself: a worker ended by one was killed from outside, so its
 *  requests in flight were innocent. (The service's own kill of a hung worker has a verdict.) */
const EXTERNAL_SIGNALS = new Set(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGQUIT', 'SIGHUP']);

/** The verdict comes first (a device-faulted worker may be stopped before it exits), then a stop
 *  the service asked for, then the signal. */
export function classifyExit(
  verdict: Verdict | null,
  stopping: boolean,
  code: number | null,
  signal: string | null,
): ExitCause {
  if (verdict) return verdict;
  if (stopping) return { kind: 'stopped' };
  if (signal !== null && EXTERNAL_SIGNALS.has(signal)) return { kind: 'external', signal };
  return { kind: 'crashed', code, signal };
}

/** The cause as the instance's last error (`/diagnostics`, `/api/models`, a failed model's reason). */
export function describeExit(cause: ExitCause): string {
  switch (cause.kind) {
    case 'device-fault':
      return `device fault: ${cause.reason}`;
    case 'load-failed':
      return `load failed [${cause.code}]: ${cause.reason}`;
    case 'hung':
      return cause.reason;
    case 'stopped':
      return 'stopped';
    case 'external':
      return `exited with signal ${cause.signal}`;
    case 'crashed':
      return `exited with ${cause.signal ? `signal ${cause.signal}` : `code ${cause.code}`}`;
  }
}
