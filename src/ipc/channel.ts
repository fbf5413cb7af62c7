// A message channel over a stream socket (the Unix domain sockets between fronts and model
// workers). A frame is the v8 serialization of the message with its typed arrays and Buffers
// left out and attached after it, as bytes: the sender hands them to the socket as they are (one
// writev, no copy into the serialization), and the receiver gets views into the frame (whose
// ArrayBuffer may hold other frames too: copy one before transferring its buffer elsewhere).
//   frame: u32 body length | u32 message length | u32 attachments | u32 length of each |
//          message | each attachment, at an offset that is a multiple of 8
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { DefaultDeserializer, DefaultSerializer } from 'node:v8';

const U32 = 4;
const ALIGN = 8;
/** The typed arrays a message may hold, by the index that names them in a frame; Buffer follows. */
const TYPED = [
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
];
const BUFFER = TYPED.length;
type TypedArrayOf = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => NodeJS.TypedArray;
const PADDING = Buffer.alloc(ALIGN);
const padTo = (n: number) => (ALIGN - (n % ALIGN)) % ALIGN;

class FrameSerializer extends DefaultSerializer {
  readonly attached: Uint8Array[] = [];

  _writeHostObject(view: NodeJS.TypedArray): void {
    const type = view instanceof Buffer ? BUFFER : TYPED.findIndex((ctor) => view.constructor === ctor);
    if (type < 0) throw new TypeError(`a ${view.constructor.name} cannot cross a channel`);
    this.writeUint32(type);
    this.writeUint32(this.attached.length);
    this.attached.push(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
  }
}

class FrameDeserializer extends DefaultDeserializer {
  constructor(
    message: Buffer,
    private readonly attached: Buffer[],
  ) {
    super(message);
  }

  _readHostObject(): NodeJS.TypedArray {
    const type = this.readUint32();
    const bytes = this.attached[this.readUint32()];
    if (type === BUFFER) return bytes;
    const size = TYPED[type].BYTES_PER_ELEMENT;
    // A frame split across socket reads may leave an attachment unaligned for its element type.
    const aligned = bytes.byteOffset % size === 0 ? bytes : Buffer.from(bytes);
    return new (TYPED[type] as TypedArrayOf)(aligned.buffer, aligned.byteOffset, aligned.byteLength / size);
  }
}

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

  /** Throws when the channel is closed, so a caller can route the message elsewhere. The
   *  message's typed arrays go out as they are: they must not change until it is written. */
  send(message: Out): void {
    if (!this.isOpen) throw new Error('channel closed');
    const serializer = new FrameSerializer();
    serializer.writeHeader();
    serializer.writeValue(message);
    const body = serializer.releaseBuffer();
    const { attached } = serializer;
    const head = Buffer.allocUnsafe(U32 * (3 + attached.length));
    let length = head.length - U32 + body.length + padTo(head.length + body.length);
    for (const [i, bytes] of attached.entries()) {
      head.writeUInt32BE(bytes.byteLength, U32 * (3 + i));
      length += bytes.byteLength + padTo(bytes.byteLength);
    }
    head.writeUInt32BE(length, 0);
    head.writeUInt32BE(body.length, U32);
    head.writeUInt32BE(attached.length, 2 * U32);
    this.socket.cork();
    this.socket.write(head);
    this.socket.write(body);
    this.pad(head.length + body.length);
    for (const bytes of attached) {
      this.socket.write(bytes);
      this.pad(bytes.byteLength);
    }
    this.socket.uncork();
  }

  close(): void {
    this.socket.end();
  }

  private pad(written: number): void {
    const n = padTo(written);
    if (n) this.socket.write(PADDING.subarray(0, n));
  }

  private receive(data: Buffer): void {
    this.chunks.push(data);
    this.buffered += data.length;
    while (this.buffered >= U32) {
      if (this.chunks[0].length < U32) this.flatten();
      const frame = U32 + this.chunks[0].readUInt32BE(0);
      if (this.buffered < frame) return;
      if (this.chunks[0].length < frame) this.flatten();
      const all = this.chunks[0];
      const rest = all.subarray(frame);
      this.chunks = rest.length ? [rest, ...this.chunks.slice(1)] : this.chunks.slice(1);
      this.buffered -= frame;
      this.emit('message', readFrame(all.subarray(0, frame)));
    }
  }

  /** One chunk of everything received so far: only once a frame is whole, or to read a length. */
  private flatten(): void {
    this.chunks = [Buffer.concat(this.chunks, this.buffered)];
  }
}

function readFrame<In>(frame: Buffer): In {
  const messageLength = frame.readUInt32BE(U32);
  const count = frame.readUInt32BE(2 * U32);
  let at = U32 * (3 + count);
  const message = frame.subarray(at, at + messageLength);
  at += messageLength + padTo(at + messageLength);
  const attached: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const length = frame.readUInt32BE(U32 * (3 + i));
    attached.push(frame.subarray(at, at + length));
    at += length + padTo(length);
  }
  const deserializer = new FrameDeserializer(message, attached);
  deserializer.readHeader();
  return deserializer.readValue() as In;
}
