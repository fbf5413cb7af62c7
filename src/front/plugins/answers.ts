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
    // connection (HTTP pipelining) is paced from now too: a client could otherwise hold the
    // budget with answers queued behind one it does not take.
    raw[HELD]?.release();
    const held = backend.requestBytes(false, socket ? () => resetSlowClient(request.raw, raw) : undefined);
    held.held(size);
    raw[HELD] = held;
    // The socket's inactivity timer. Once the answer is taken, Node's keep-alive handling sets it
    // again (it runs first), unless a pipelined request is waiting for its model: then it is
    // cleared, as Node left it.
    if (socket) {
      socket.setTimeout(sendTimeoutMs);
      raw.once('finish', () => socket.timeout === sendTimeoutMs && socket.setTimeout(0));
    }
    if (size <= ANSWER_PIECE || !socket) return payload;
    reply.header('content-length', size);
    const answer = typeof payload === 'string' ? Buffer.from(payload) : (payload as Buffer);
    return inPieces(answer, (n) => held.taken(n));
  });
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
