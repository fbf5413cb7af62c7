// Answers a client does not take. An answer's bytes count against the front's budget
// (front.max_inflight_bytes) until its socket has taken them, and a response whose client takes
// nothing for front.body_timeout_ms closes its connection (nginx's send_timeout; the socket's
// inactivity timer, which each write it takes restarts). Without them a client that never read
// kept its answer in the front for as long as it stayed connected: a new connection every 150 ms,
// each asking /v2 for the masks of 8 blank 512 px tiles and reading nothing, took a front from 435
// to 1,781 MB in a minute, and the kernel's TCP buffers to 1.6 GB (an ad hoc script). gRPC's
// answers are held the same way (v2/grpc-server.ts).
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { ModelBackend, RequestBytes } from '../backend.js';

export interface AnswersOptions {
  backend: Pick<ModelBackend, 'requestBytes'>;
  /** front.body_timeout_ms: how long a client may take nothing of its answer. */
  sendTimeoutMs: number;
}

/** What a response holds of the budget: an error's answer sent after a failed one replaces it. */
const HELD = Symbol('answer held');

async function answers(app: FastifyInstance, { backend, sendTimeoutMs }: AnswersOptions): Promise<void> {
  app.addHook('onSend', async (_request, reply, payload) => {
    const raw = reply.raw as typeof reply.raw & { [HELD]?: RequestBytes };
    const size =
      typeof payload === 'string' ? Buffer.byteLength(payload) : Buffer.isBuffer(payload) ? payload.length : 0;
    if (!raw[HELD]) {
      const release = () => raw[HELD]?.release();
      raw.once('finish', release);
      raw.once('close', release);
    }
    raw[HELD]?.release();
    // Held whatever the budget: the work is done; past it, new requests wait for it to be taken.
    const held = backend.requestBytes();
    held.held(size);
    raw[HELD] = held;
    // The socket's inactivity timer; an injected request has no socket to time. Once the answer
    // is taken, Node's keep-alive handling sets it again (it runs first), unless a pipelined
    // request is waiting for its model: then it is cleared, as Node left it.
    const socket = raw.socket;
    if (typeof socket?.setTimeout === 'function') {
      socket.setTimeout(sendTimeoutMs);
      raw.once('finish', () => socket.timeout === sendTimeoutMs && socket.setTimeout(0));
    }
    return payload;
  });
}

export default fp(answers, { name: 'answers' });
