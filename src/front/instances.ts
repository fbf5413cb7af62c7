// What a front knows of the models' worker instances: the states the supervisor last sent, and a
// channel to each ready instance, opened when it becomes ready and retired when it no longer is.
// Requests in flight on a channel that closes learn why: never connected (nothing reached the
// worker), or the worker's exit as the supervisor tells it, waited for a moment.
import { createConnection, type Socket } from 'node:net';
import { Channel } from '../ipc/channel.js';
import type { ChannelRequest, ModelView, WorkerMessage } from '../ipc/protocol.js';
import { unavailable } from './backend.js';
import { NotSent, WorkerLost } from './tile-failures.js';
import { WorkerLink } from './worker-link.js';

/** How long requests of a closed channel wait for the supervisor to say why their worker died. */
const EXIT_NEWS_MS = 1000;
/** Worker exits remembered for channels that close after the news arrives. */
const EXITS_KEPT = 256;

/** Opens a stream to a worker's socket path (node:net's createConnection unless injected). */
export type Connect = (path: string) => Socket;

export class Instances {
  private views = new Map<string, ModelView>();
  private readonly links = new Map<number, WorkerLink>();
  /** Channels closed before the news of their worker's exit. */
  private readonly lostLinks = new Map<number, WorkerLink>();
  private readonly exits = new Map<number, boolean>();

  constructor(private readonly connect: Connect = createConnection) {}

  /** The supervisor's models message: a channel to each newly ready instance; those no longer
   *  ready are retired. */
  update(models: ModelView[]): void {
    this.views = new Map(models.map((m) => [m.name, m]));
    const ready = new Set<number>();
    for (const m of models) {
      for (const i of m.instances) {
        if (i.state !== 'ready' || !i.socket || !i.pid) continue;
        ready.add(i.pid);
        if (!this.links.has(i.pid)) this.open(i.pid, i.socket);
      }
    }
    for (const [pid, link] of this.links) if (!ready.has(pid)) link.retire();
  }

  /** The supervisor's news of a worker's exit; `external` when it was killed from outside. */
  exited(pid: number, external: boolean): void {
    this.exits.set(pid, external);
    if (this.exits.size > EXITS_KEPT) this.exits.delete(this.exits.keys().next().value!);
    this.lost(pid);
  }

  models(): ModelView[] {
    return [...this.views.values()];
  }

  model(name: string): ModelView | undefined {
    return this.views.get(name);
  }

  /** Throws what to answer when no instance of the model can take a request. */
  available(model: string): void {
    const error = unavailable(model, this.views.get(model));
    if (error) throw error;
  }

  /** The open channels to the model's ready instances. */
  ready(model: string, exclude?: WorkerLink): WorkerLink[] {
    const links: WorkerLink[] = [];
    for (const instance of this.views.get(model)?.instances ?? []) {
      if (instance.state !== 'ready' || !instance.pid) continue;
      const link = this.links.get(instance.pid);
      if (link && link !== exclude && link.channel.isOpen) links.push(link);
    }
    return links;
  }

  private open(pid: number, path: string): void {
    const link = new WorkerLink(pid, new Channel<WorkerMessage, ChannelRequest>(this.connect(path)));
    this.links.set(pid, link);
    link.channel.on('close', () => {
      if (this.links.get(pid) === link) this.links.delete(pid);
      // The worker holds nothing of this front's any more (answers still awaited learn why below).
      link.releaseAll();
      // Never connected: nothing reached the worker.
      if (!link.connected) return link.requests.rejectAll(() => new NotSent());
      if (this.exits.has(pid)) return this.lost(pid, link);
      this.lostLinks.set(pid, link);
      setTimeout(() => this.lost(pid), EXIT_NEWS_MS);
    });
  }

  /** Requests in flight on a dead worker's channel learn why it died. */
  private lost(pid: number, link = this.lostLinks.get(pid)): void {
    if (!link) return;
    this.lostLinks.delete(pid);
    const external = this.exits.get(pid) ?? false;
    link.requests.rejectAll(() => new WorkerLost(external));
  }
}
