// Connections the front resets because their client fell behind its pace while others needed the
// budget (pace.ts, queue-share.ts): reset, not closed, so that what the kernel holds of an answer
// is not left queued for a client that reads nothing; and remembered, so that every request on
// the connection not answered by then (the one behind, those pipelined after it) is recorded as
// let go of (TILE_ERR_CLIENT_TOO_SLOW), not as a client that left.
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

const reset = new WeakSet<Socket>();

/** Resets the request's connection, once for all the holders on it. */
export function resetSlowClient(request: IncomingMessage): void {
  const { socket } = request;
  if (!socket || socket.destroyed) return;
  reset.add(socket);
  socket.resetAndDestroy();
}

export const wasReset = (request: IncomingMessage): boolean => reset.has(request.socket);
