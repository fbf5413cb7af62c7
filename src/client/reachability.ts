// Whether the servers answer at all, asked once before a run: a run is refused at once when none
// does, rather than waiting out each tile's deadline.
import { sleep, type Server } from './failover.js';
import { TileClientError } from './tile-client-error.js';

/** Checks that the servers answer at all (GET /health/live), retrying connection errors for up to
 *  `withinMs`. Returns the servers that did not answer when others did; throws when none did. */
export async function checkReachable(servers: readonly Server[], withinMs: number): Promise<string[]> {
  const deadline = Date.now() + withinMs;
  const reasons = new Map<Server, string>();
  const answered = new Set<Server>();
  for (let attempt = 0; ; attempt++) {
    await Promise.all(
      servers
        .filter((s) => !answered.has(s))
        .map(async (s) => {
          try {
            const res = await s.pool.request({
              method: 'GET',
              path: '/health/live',
              headersTimeout: Math.max(1000, deadline - Date.now()),
              bodyTimeout: 5000,
            });
            await res.body.dump();
            answered.add(s);
          } catch (err) {
            reasons.set(s, (err as NodeJS.ErrnoException).code ?? (err as Error).message);
          }
        }),
    );
    if (answered.size === servers.length || (answered.size && attempt >= 1) || Date.now() >= deadline) break;
    await sleep(Math.min(1000, 250 * 2 ** attempt, Math.max(0, deadline - Date.now())));
  }
  const silent = servers.filter((s) => !answered.has(s)).map((s) => `${s.url} (${reasons.get(s)})`);
  if (!answered.size)
    throw new TileClientError(
      'TILE_ERR_CLIENT_UNREACHABLE',
      `cannot reach ${silent.join(', ')} within ${Math.round(withinMs / 1000)} s; is the service running there?`,
    );
  return silent;
}
