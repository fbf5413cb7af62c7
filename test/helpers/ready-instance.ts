// A ready instance as the supervisor describes it to the fronts, for in-process front tests.
import type { InstanceView } from '../../src/ipc/protocol.js';

export const readyInstance = (model: string, index: number, pid: number, socket: string): InstanceView =>
  ({
    id: `${model}#${index}`,
    pid,
    state: 'ready',
    socket,
    restarts: 0,
    gpu: null,
    provider: 'cpu',
    providerSkipped: [],
    adapter: null,
    loadMs: 1,
    warmup: null,
    lastError: null,
  }) as InstanceView;
