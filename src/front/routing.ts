// Which instance runs a request's tiles: the ready one whose worker holds the fewest of this
// front's tiles, and once more on another for the tiles that may be retried (tile-failures.ts).
// Each tile's result, or the ServiceError it is answered with.
import type { InferResult, TileJob } from '../ipc/protocol.js';
import { errors, type ServiceError } from '../lib/errors.js';
import type { Instances } from './instances.js';
import { failureAnswer, retryable } from './tile-failures.js';
import type { WorkerLink } from './worker-link.js';

export class Routing {
  constructor(
    private readonly instances: Instances,
    /** The model's request_timeout_ms, to word a tile that expired. */
    private readonly timeoutMs: (model: string) => number,
  ) {}

  /** Sends the tiles as one message to the least loaded instance; each takes a place of `hold`
   *  and is dropped wherever it is once `deadline` passes or `signal` aborts. Throws when no
   *  instance can take them. */
  async run(
    model: string,
    jobs: TileJob[],
    deadline: number,
    hold: () => () => void,
    signal?: AbortSignal,
  ): Promise<(InferResult | ServiceError)[]> {
    const send = (link: WorkerLink, some: TileJob[]) => Promise.allSettled(link.infer(some, deadline, hold, signal));
    const first = this.pick(model);
    const settled = await send(first, jobs);
    // Once more on another instance, for the tiles that never reached the first one or whose
    // worker was killed from outside. A worker that died of a request itself is not given another.
    const again = settled.flatMap((s, i) => (s.status === 'rejected' && retryable(s.reason) ? [i] : []));
    if (again.length && Date.now() < deadline) {
      const retried = await Promise.resolve()
        .then(() =>
          send(
            this.pick(model, first),
            again.map((i) => jobs[i]!),
          ),
        )
        .catch((err: unknown) =>
          again.map((): PromiseSettledResult<InferResult> => ({ status: 'rejected', reason: err })),
        );
      again.forEach((i, k) => (settled[i] = retried[k]!));
    }
    const timeoutMs = () => this.timeoutMs(model);
    return settled.map((s, i) =>
      s.status === 'fulfilled' ? s.value : failureAnswer(model, s.reason, jobs[i]!, timeoutMs),
    );
  }

  /** The ready instance whose worker holds the fewest tiles: this front's, and the other fronts'
   *  by its recent load report (an instance full of theirs refuses a tile). */
  private pick(model: string, exclude?: WorkerLink): WorkerLink {
    const held = (link: WorkerLink) => link.inflight + (link.backlog.heldByOthers() ?? 0);
    let best: WorkerLink | null = null;
    for (const link of this.instances.ready(model, exclude)) if (!best || held(link) < held(best)) best = link;
    if (best) return best;
    this.instances.available(model);
    throw errors.modelLoading(model);
  }
}
