// A model request's ticket (its place in the model's queue, backend.ts) through the request's
// life: taken before the body is read, the body's bytes counted against it as they arrive, and
// held until the response is done; a client that leaves first cancels its tiles. The contract's
// routes (plugins/model-routes.ts) and the Open Inference Protocol's (plugins/v2.ts) use it.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Transform, type Readable } from 'node:stream';
import type { StageTimes } from '../ipc/protocol.js';
import type { Ticket, Upload } from './backend.js';
import { whenGone } from './response-gone.js';
import { resetSlowClient } from './slow-clients.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** A model request's place in the queue, the signal of its client leaving, and once served
     *  its tile's worker times (for the usage log). */
    tile: { ticket: Ticket; signal: AbortSignal; times?: StageTimes } | null;
  }
}

/** The body's bytes count against the front's budget as they arrive, not as declared: a slow or
 *  stalled upload holds only what it has sent. A chunk past the budget fails the request (503
 *  TILE_ERR_FRONT_BUSY), so the bound on the front's memory stays. */
export const countBytes = async (request: FastifyRequest, _reply: FastifyReply, payload: Readable) => {
  const { ticket } = request.tile!;
  const counted = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      try {
        ticket.received(chunk.length);
        callback(null, chunk);
      } catch (err) {
        callback(err as Error);
      }
    },
  });
  payload.on('error', (err) => counted.destroy(err));
  payload.once('end', () => ticket.arrived());
  return payload.pipe(counted);
};

/** The request's body on its way: when its headers declare its length, admission counts it ahead
 *  in the measure that it has come; its connection is reset if its client falls behind its pace
 *  while others need the budget (pace.ts). */
export function uploadOf(request: FastifyRequest): Upload {
  const declared = Number(request.headers['content-length']);
  return {
    ...(declared > 0 && { declared }),
    buffered: () => request.raw.readableLength,
    abandon: () => resetSlowClient(request.raw),
    connection: request.raw.socket ?? undefined,
  };
}

/** The request keeps its ticket until the response is done; a client that leaves first aborts
 *  the request's signal, which cancels its tiles. */
export function holdTicket(request: FastifyRequest, reply: FastifyReply, ticket: Ticket): void {
  const left = new AbortController();
  request.tile = { ticket, signal: left.signal };
  whenGone(request.raw, reply.raw, () => {
    if (!reply.raw.writableEnded) left.abort();
    ticket.release();
  });
}
