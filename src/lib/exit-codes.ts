// Exit codes of the service's processes, so the supervisor, systemd and a reader of the journal
// can tell why a process ended.
export const ExitCode = {
  OK: 0,
  /** Grace period over with requests unfinished. */
  UNFINISHED: 1,
  /** The configuration (file, environment, command line) is invalid: fix it, a restart won't. */
  CONFIG: 2,
  /** A model worker could not load its package. */
  LOAD_FAILED: 3,
  /** A model worker's session thread died. */
  SESSION_THREAD: 4,
  /** A model worker's device failed (out of memory, lost, a sticky CUDA error): restart it. */
  DEVICE_FAULT: 5,
} as const;
