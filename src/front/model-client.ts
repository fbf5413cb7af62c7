// An HTTP front's way to the models, over the supervisor's messages and the workers' sockets: the
// ModelBackend the HTTP app and the gRPC service use. Each job is its own module: the instances
// and a channel to each ready one (instances.ts, worker-link.ts), which instance runs a request
// and the one retry on another (routing.ts, tile-failures.ts), this front's share of each model's
// queue and the request bytes it holds (queue-share.ts, admission.ts), and the usage log's
// batches (usage-batch.ts). Here: the supervisor's messages and queries.
import type { Registry } from 'prom-client';
import { modelEntry, timerMs, type ServiceConfig } from '../config/config.js';
import type { FromFront, FrontQuery, InferResult, ModelView, TileJob, ToFront, UsageReport } from '../ipc/protocol.js';
import { RequestReply } from '../ipc/request-reply.js';
import { ServiceError } from '../lib/errors.js';
import type { Evictable, InferOptions, ModelBackend, RequestBytes, Ticket, Upload } from './backend.js';
import { type Connect, Instances } from './instances.js';
import { QueueShare } from './queue-share.js';
import { Routing } from './routing.js';
import { UsageBatch } from './usage-batch.js';
import { freeBytes } from './free-bytes.js';

export interface ModelClientOptions {
  /** Opens a stream to a worker's socket path; node:net's createConnection by default. */
  connect?: Connect;
}

export class ModelClient implements ModelBackend {
  private readonly instances: Instances;
  private readonly queue: QueueShare;
  private readonly routing: Routing;
  private readonly usage: UsageBatch;
  private readonly queries = new RequestReply<unknown>();
  draining = false;

  constructor(
    private readonly config: ServiceConfig,
    /** How many fronts share each model's queue. */
    fronts: number,
    /** Sends to the supervisor; `written` is called once the message has left this process. */
    private readonly send: (message: FromFront, written?: () => void) => void,
    { connect }: ModelClientOptions = {},
  ) {
    this.instances = new Instances(connect);
    this.queue = new QueueShare(config, fronts, (model) =>
      this.instances.ready(model).map((link) => ({ backlog: link.backlog, inflight: link.inflight })),
    );
    this.routing = new Routing(this.instances, (model) => this.entry(model).request_timeout_ms);
    this.usage = new UsageBatch(send);
  }

  /** Messages from the supervisor. */
  onMessage(message: ToFront): void {
    switch (message.type) {
      case 'models':
        this.instances.update(message.models);
        return;
      case 'worker-exit':
        this.instances.exited(message.pid, message.external);
        return;
      case 'reply':
        this.queries.settle(message.id, message.data);
        return;
      case 'drain':
        this.draining = true;
        return;
    }
  }

  models(): ModelView[] {
    return this.instances.models();
  }

  model(name: string): ModelView | undefined {
    return this.instances.model(name);
  }

  /** Requests this front holds for `model`. */
  queued(model: string): number {
    return this.queue.queued(model);
  }

  admit(model: string, tiles = 1, upload?: Upload): Ticket {
    this.instances.available(model);
    return this.queue.admit(model, tiles, upload);
  }

  requestBytes(control?: boolean, client?: Evictable): RequestBytes {
    return this.queue.requestBytes(control, client);
  }

  /** Runs a tile: a batch of one. */
  async infer(model: string, job: TileJob, options?: InferOptions): Promise<InferResult> {
    const [answer] = await this.inferBatch(model, [job], options);
    if (answer instanceof ServiceError) throw answer;
    return answer!;
  }

  /** Runs a request's tiles on the least loaded instance, sent as one message; each is dropped
   *  wherever it is once the deadline passes or `signal` aborts (the client left), and holds its
   *  own place of the ticket until the worker is done with it. Each tile's result or error, in
   *  order. */
  async inferBatch(
    model: string,
    jobs: TileJob[],
    { deadline = Date.now() + this.entry(model).request_timeout_ms, signal, ticket, spent }: InferOptions = {},
  ): Promise<(InferResult | ServiceError)[]> {
    const hold = ticket ? () => ticket.hold() : () => () => {};
    const results = await this.routing.run(model, jobs, deadline, hold, signal);
    // A worker answers a tile only once it has read the whole of it, and a tile goes to another
    // worker only after the first answered or died: with every tile answered with a result, no
    // write to a worker still reads these bytes. Otherwise (dropped, cancelled, failed) one may.
    if (spent && results.every((r) => !(r instanceof ServiceError))) freeBytes(spent);
    return results;
  }

  diagnostics(categories: string[]): Promise<unknown> {
    return this.query({ query: 'diagnostics', categories });
  }

  /** The supervisor aggregates every front's registry (prom-client's AggregatorRegistry). */
  async metrics(_local: Registry): Promise<string> {
    return (await this.query({ query: 'metrics' })) as string;
  }

  /** Usage goes to the supervisor's one log in batches (usage-batch.ts). */
  recordUsage(entry: UsageReport): void {
    this.usage.record(entry);
  }

  /** Sends the usage entries not sent yet: before a query (so /diagnostics on this front shows its
   *  own requests) and before the front exits, which waits until they have left the process. */
  flushUsage(): Promise<void> {
    return this.usage.flush();
  }

  private query(query: FrontQuery): Promise<unknown> {
    void this.flushUsage();
    const ms = timerMs(this.config.supervisor.probe_timeout_ms + 2000);
    return this.queries.request((id) => this.send({ type: 'query', id, ...query }), {
      ms,
      error: () => new Error(`the supervisor did not answer within ${ms} ms`),
    });
  }

  private entry(model: string) {
    return modelEntry(this.config, model);
  }
}
