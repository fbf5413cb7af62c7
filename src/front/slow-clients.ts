// Connections the front resets because their client fell behind its pace while others needed the
// budget (pace.ts, queue-share.ts): reset, not closed, so that what the kernel holds of an answer
// is not left queued for a client that reads nothing; and remembered, so that the request is
// recorded as let go of (TILE_ERR_CLIENT_TOO_SLOW), not as a client that left.
import type { ServerResponse } from 'node:http';

const reset = new WeakSet<ServerResponse>();

export function resetSlowClient(response: ServerResponse): void {
  reset.add(response);
  response.socket?.resetAndDestroy();
}

export const wasReset = (response: ServerResponse): boolean => reset.has(response);
