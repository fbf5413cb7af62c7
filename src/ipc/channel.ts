// A message channel over a stream socket (the Unix domain sockets between fronts and model
// workers): each message is a 4-byte length and the v8 serialization of the value, so typed
// arrays and Buffers cross as bytes, as with `serialization: 'advanced'` IPC, without a relay.
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { deserialize, serialize } from 'node:v8';

const HEADER = 4;

export class Channel<In, Out> extends EventEmitter<{ message: [In]; close: [] }> {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private closed = false;

  constructor(readonly socket: Socket) {
    super();
    socket.setNoDelay(true);
    socket.on('data', (data) => this.receive(data));
    // A peer that dies resets the socket; 'close' follows either way.
    socket.on('error', () => {});
    socket.on('close', () => {
      this.closed = true;
      this.emit('close');
    });
  }

  get isOpen(): boolean {
    return !this.closed && !this.socket.destroyed;
  }

  /** Throws when the channel is closed, so a caller can route the message elsewhere. */
  send(message: Out): void {
    if (!this.isOpen) throw new Error('channel closed');
    const body = serialize(message);
    const header = Buffer.allocUnsafe(HEADER);
    header.writeUInt32BE(body.length, 0);
    this.socket.cork();
    this.socket.write(header);
    this.socket.write(body);
    this.socket.uncork();
  }

  close(): void {
    this.socket.end();
  }

  private receive(data: Buffer): void {
    this.chunks.push(data);
    this.buffered += data.length;
    while (this.buffered >= HEADER) {
      const head = this.chunks.length === 1 ? this.chunks[0] : this.flatten();
      const length = head.readUInt32BE(0);
      if (this.buffered < HEADER + length) return;
      const all = this.chunks.length === 1 ? this.chunks[0] : this.flatten();
      const message = deserialize(all.subarray(HEADER, HEADER + length)) as In;
      const rest = all.subarray(HEADER + length);
      this.chunks = rest.length ? [rest] : [];
      this.buffered = rest.length;
      this.emit('message', message);
    }
  }

  private flatten(): Buffer {
    const all = Buffer.concat(this.chunks, this.buffered);
    this.chunks = [all];
    return all;
  }
}
