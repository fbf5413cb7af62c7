// When a response is done with its connection: at its 'close', or, for a response queued behind
// another on its connection (HTTP pipelining), at its connection's: Node emits neither 'finish'
// nor 'close' on such a response when the connection closes first (five pipelined answers of a
// connection the client dropped held their bytes of the budget for good: a review session). What a
// request holds (its ticket, its answer's bytes, its usage entry) is given back through it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Per connection, the responses waiting for its close: one listener each, not one a request. */
const waiting = new WeakMap<Socket, Set<() => void>>();

export function whenGone(request: IncomingMessage, response: ServerResponse, gone: () => void): void {
  const socket = request.socket;
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    waiting.get(socket)?.delete(once);
    gone();
  };
  // Gone already (its client left while the model worked): neither will come. Next tick: the
  // caller sets up what `gone` gives back after calling this (a review session found 20 such
  // answers' bytes held for good).
  if (response.destroyed || socket?.destroyed) return void process.nextTick(once);
  response.once('close', once);
  // A response that has its connection is told of its close; an injected request (app.inject)
  // has no connection to close.
  if (response.socket || typeof socket?.once !== 'function') return;
  let responses = waiting.get(socket);
  if (!responses) {
    const set = new Set<() => void>();
    waiting.set(socket, (responses = set));
    socket.once('close', () => {
      for (const gone of [...set]) gone();
    });
  }
  responses.add(once);
}
