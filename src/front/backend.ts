// What the HTTP app needs of the models behind it: their states, admission before a body is
// read, inference, and the supervisor's diagnostics, metrics and usage log. An HTTP front
// implements it over the supervisor's messages and the workers' sockets (src/front/model-client.ts);
// the in-process tests implement it over a fake model.
import type { Registry } from 'prom-client';
import type { BatchResult, InferResult, ModelView, TileJob, UsageReport } from '../ipc/protocol.js';
import { errors, type ServiceError } from '../lib/errors.js';

export interface ModelBackend {
  /** Every enabled model, as last reported by the supervisor. */
  models(): ModelView[];
  model(name: string): ModelView | undefined;
  /** Admits a request for `model` whose body has `bytes` bytes, before the body is read: throws
   *  the ServiceError to answer with (loading, failed, queue full, front busy), or returns the
   *  function that gives the place back once the response is done. */
  admit(model: string, bytes: number): () => void;
  /** Requests for `model` admitted here and not yet answered. */
  queued(model: string): number;
  /** Runs a tile on an instance of `model`: the result, or a ServiceError. */
  infer(model: string, job: TileJob): Promise<InferResult>;
  /** Runs a request's tiles on one instance, sent as one message: each tile's result or error,
   *  in order; a ServiceError when none ran (loading, deadline, worker gone). */
  inferBatch(model: string, jobs: TileJob[]): Promise<BatchResult['results']>;
  /** Not ready while draining for a stop (a balancer takes the host out), still serving. */
  readonly draining: boolean;
  diagnostics(categories: string[]): Promise<unknown>;
  /** Prometheus text for the whole service; `local` holds this front's own metrics. */
  metrics(local: Registry): Promise<string>;
  recordUsage(entry: UsageReport): void;
}

/** Why a model cannot take a request now (failed to load, or still loading), or null when ready. */
export function unavailable(name: string, view: ModelView | undefined): ServiceError | null {
  if (view?.state === 'failed') return errors.modelFailed(name, view.reason ?? 'unknown');
  return view?.state === 'ready' ? null : errors.modelLoading(name);
}
