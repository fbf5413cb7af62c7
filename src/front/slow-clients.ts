// Connections the front resets because their client fell behind its pace while others needed the
// budget (pace.ts, queue-share.ts): reset, not closed, so that what the kernel holds of an answer
// is not left queued for a client that reads nothing; and remembered, so that the request is
// recorded as let go of (TILE_ERR_CLIENT_TOO_SLOW), not as a client that left.
import type { IncomingMessage, ServerResponse } from 'node:http';

const reset = new WeakSet<ServerResponse>();

/** Through the request's socket: a response queued behind another (HTTP pipelining) has none yet. */
export function resetSlowClient(request: IncomingMessage, response: ServerResponse): void {
  reset.add(response);
  // Answers queued on one connection are let go of together: the first resets it.
  if (request.socket && !request.socket.destroyed) request.socket.resetAndDestroy();
}

export const wasReset = (response: ServerResponse): boolean => reset.has(response);
