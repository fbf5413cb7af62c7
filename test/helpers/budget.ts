// Probes of a front's byte budget (front.max_inflight_bytes).
import type { RequestBytes } from '../../src/front/backend.js';

/** Whether `bytes` more fit in the budget now, any holder behind its pace let go of to make the
 *  room (a probe that gives them back). */
export function fits(budget: { requestBytes(): RequestBytes }, bytes: number): boolean {
  const probe = budget.requestBytes();
  try {
    probe.received(bytes);
    return true;
  } catch {
    return false;
  } finally {
    probe.release();
  }
}
