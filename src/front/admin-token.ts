// Optional bearer token for the operator endpoints (/diagnostics, /metrics); off by default, as
// the spec declares no authentication and the service binds to loopback.
import type { FastifyRequest } from 'fastify';
import { errors } from '../lib/errors.js';

/** Answered 401 {"detail": "Not authenticated"} with WWW-Authenticate: Bearer (plugins/errors.ts). */
export function requireAdminToken(token: string | null) {
  return async (request: FastifyRequest) => {
    if (token !== null && request.headers.authorization !== `Bearer ${token}`) throw errors.unauthorized();
  };
}
