// A message channel over a stream socket (the Unix domain sockets between fronts and model
// workers). A frame is the v8 serialization of the message with its typed arrays and Buffers
// left out and attached after it, as bytes: the sender hands them to the socket as they are (one
// writev, no copy into the serialization), and the receiver gets each attachment as a view into
// the socket read that holds it (whose ArrayBuffer may hold other bytes too: copy one before
// transferring its buffer elsewhere), or, when it spans reads, copied into a buffer of its own.
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
    const type = view instanceof Buffer ? BUFFER : TYPED.indexOf(view.constructor as (typeof TYPED)[number]);
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

  /** A message is emitted only once the whole of its frame is here: the front frees a tile's
   *  bytes once its answer comes (src/front/free-bytes.ts), which relies on that. */
  private receive(data: Buffer): void {
    this.chunks.push(data);
    this.buffered += data.length;
    while (this.buffered >= U32) {
      const frame = U32 + this.bytes(0, U32).readUInt32BE(0);
      if (this.buffered < frame) return;
      const message = readFrame<In>((offset, length) => this.bytes(offset, length));
      this.consume(frame);
      this.emit('message', message);
    }
  }

  /** Received bytes [offset, offset + length): a view where one socket read holds them all, else
   *  a copy of their own. A large attachment (a tile: 150 KB over 64 KB reads) is so copied once,
   *  into a buffer it has to itself, instead of into the whole frame and then out of it. */
  private bytes(offset: number, length: number): Buffer {
    // An empty attachment may end the frame, where no chunk follows.
    if (length === 0) return Buffer.alloc(0);
    let i = 0;
    while (offset >= this.chunks[i].length) offset -= this.chunks[i++].length;
    if (offset + length <= this.chunks[i].length) return this.chunks[i].subarray(offset, offset + length);
    const out = Buffer.allocUnsafe(length);
    for (let at = 0; at < length; i++, offset = 0) at += this.chunks[i].copy(out, at, offset);
    return out;
  }

  /** Drops the first `n` bytes received. */
  private consume(n: number): void {
    this.buffered -= n;
    while (n > 0 && n >= this.chunks[0].length) n -= this.chunks.shift()!.length;
    if (n > 0) this.chunks[0] = this.chunks[0].subarray(n);
  }
}

/** The message of the frame at the start of what was received, read through `bytes`. */
function readFrame<In>(bytes: (offset: number, length: number) => Buffer): In {
  const head = bytes(U32, 2 * U32);
  const messageLength = head.readUInt32BE(0);
  const count = head.readUInt32BE(U32);
  const lengths = count ? bytes(3 * U32, count * U32) : Buffer.alloc(0);
  let at = U32 * (3 + count);
  const message = bytes(at, messageLength);
  at += messageLength + padTo(at + messageLength);
  const attached: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const length = lengths.readUInt32BE(U32 * i);
    attached.push(bytes(at, length));
    at += length + padTo(length);
  }
  const deserializer = new FrameDeserializer(message, attached);
  deserializer.readHeader();
  return deserializer.readValue() as In;
}
