// Optional bearer token for the operator endpoints (/diagnostics, /metrics); off by default, as
// the spec declares no authentication and the service binds to loopback.
import type { FastifyReply, FastifyRequest } from 'fastify';

export function requireAdminToken(token: string | null) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    if (token !== null && request.headers.authorization !== `Bearer ${token}`) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({ detail: 'Not authenticated' });
    }
  };
}
