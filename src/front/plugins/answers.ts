// Answers a client does not take. An answer's bytes count against the front's budget
// (front.max_inflight_bytes) until its socket has taken them, and a response whose client takes
// nothing for front.body_timeout_ms closes its connection (nginx's send_timeout; the socket's
// inactivity timer, which each write it takes restarts). Without them a client that never read
// kept its answer in the front for as long as it stayed connected: a new connection every 150 ms,
// each asking /v2 for the masks of 8 blank 512 px tiles and reading nothing, took a front from 435
// to 1,781 MB in a minute, and the kernel's TCP buffers to 1.6 GB (an ad hoc script). An answer is
// written in pieces, each once the socket has taken the last, so that its client's pace shows
// (pace.ts): one that falls behind it gives way when the budget is full (its connection reset),
// rather than every new request getting 503 for as long as it stays. gRPC's answers are held the
// same way (v2/grpc-server.ts).
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import type { ModelBackend, RequestBytes } from '../backend.js';
import { ANSWER_PIECE } from '../pace.js';
import { whenGone } from '../response-gone.js';
import { resetSlowClient } from '../slow-clients.js';

export interface AnswersOptions {
  backend: Pick<ModelBackend, 'requestBytes'>;
  /** front.body_timeout_ms: how long a client may take nothing of its answer. */
  sendTimeoutMs: number;
}

/** What a response holds of the budget: an error's answer sent after a failed one replaces it. */
const HELD = Symbol('answer held');

async function answers(app: FastifyInstance, { backend, sendTimeoutMs }: AnswersOptions): Promise<void> {
  app.addHook('onSend', async (request, reply, payload) => {
    const raw = reply.raw as typeof reply.raw & { [HELD]?: RequestBytes };
    const size =
      typeof payload === 'string' ? Buffer.byteLength(payload) : Buffer.isBuffer(payload) ? payload.length : 0;
    if (!raw[HELD]) {
      const release = () => raw[HELD]?.release();
      raw.once('finish', release);
      whenGone(request.raw, raw, release);
    }
    // An injected request has no connection to time or reset.
    const socket = typeof request.raw.socket?.setTimeout === 'function' ? request.raw.socket : null;
    // Held whatever the budget: the work is done; past it, new requests wait for it to be taken,
    // or for its client to fall behind its pace. An answer queued behind another on its
    // connection (HTTP pipelining) waits for its turn, not for its client: it is paced and timed
    // from its turn, and let go of with the connection's answers (a client could otherwise hold
    // the budget with answers queued behind one it does not take).
    raw[HELD]?.release();
    const held = backend.requestBytes(
      false,
      socket
        ? { evict: () => resetSlowClient(request.raw), connection: socket, queued: raw.socket === null }
        : undefined,
    );
    held.held(size);
    raw[HELD] = held;
    // From its turn, its pace and the socket's inactivity timer. Once the answer is taken, Node's
    // keep-alive handling sets the timer again (it runs first), unless a pipelined request is
    // waiting for its model: then it is cleared, as Node left it.
    if (socket)
      onTurn(raw, () => {
        held.turn();
        socket.setTimeout(sendTimeoutMs);
        const turn = (turns.get(socket) ?? 0) + 1;
        turns.set(socket, turn);
        raw.once(
          'finish',
          () => turns.get(socket) === turn && socket.timeout === sendTimeoutMs && socket.setTimeout(0),
        );
      });
    if (size <= ANSWER_PIECE || !socket) return payload;
    reply.header('content-length', size);
    const answer = typeof payload === 'string' ? Buffer.from(payload) : (payload as Buffer);
    return inPieces(answer, (n) => held.taken(n));
  });
}

/** Per connection, how many answers have taken their turn: an answer done clears the inactivity
 *  timer only if it was the last to set it (Node gives the next its turn before the last one's
 *  'finish' listeners run). A count, not the answer, which would keep each connection's last
 *  request, and what it buffered, for as long as the connection lives. */
const turns = new WeakMap<Socket, number>();

/** Calls `turn` once the response has its connection: now, or when the answers before it on the
 *  connection are done. */
function onTurn(response: ServerResponse, turn: () => void): void {
  if (response.socket) turn();
  else response.once('socket', turn);
}

/** `answer` as a stream of pieces, each read once the socket has taken the one before (fastify
 *  pipes it: a write past the socket's high-water mark pauses it until 'drain'; a high-water mark
 *  of 0 reads nothing ahead), which counts that one as taken. */
function inPieces(answer: Buffer, taken: (bytes: number) => void): Readable {
  let at = 0;
  return new Readable({
    highWaterMark: 0,
    read() {
      if (at > 0) taken(Math.min(ANSWER_PIECE, answer.length - (at - ANSWER_PIECE)));
      this.push(at < answer.length ? answer.subarray(at, (at += ANSWER_PIECE)) : null);
    },
  });
}

export default fp(answers, { name: 'answers' });
