// gRPC's length-prefixed messages (PROTOCOL-HTTP2.md: a compressed flag, a 4-byte big-endian
// length, the message) read from a call's DATA frames, in place of grpc-js's StreamDecoder, whose
// output it matches. grpc-js keeps every frame of a message until the last one arrives and then
// joins them. Each frame is a view of one of Node's HTTP/2 socket reads, and the calls of a
// connection share them: a 64 KiB read holds frames of several calls and lives until the slowest
// of them is whole. At c=16 that outlived the scavenges, so the reads were promoted, where only a
// mark-compact frees them; V8 starts one each time 64 MB more of such memory is alive. gRPC
// batches of 32 tiles: 54-66 mark-compacts in 13 s against v2 binary's 7, and the front's CPU a
// tile 0.30 ms against 0.20 (docs/open-inference-protocol.md). Here a message gets a buffer of its
// own once a share of it has arrived, each frame after that is copied in as it comes, and the
// reads die young. Each byte is still copied once.

const PREFIX = 5;

/** A message's buffer is allocated once 1/COMMIT_AT of it has arrived: never more than that many
 *  times what its client has sent (whose bytes count against the front's budget as they arrive),
 *  so a length prefix alone allocates nothing. */
export const COMMIT_AT = 4;

export class MessageDecoder {
  private readonly prefix = Buffer.alloc(PREFIX);
  private prefixRead = 0;
  /** The message's length, and how much of it has arrived. */
  private size = 0;
  private arrived = 0;
  /** Its frames until its buffer is allocated; then the buffer, prefix first. */
  private frames: Buffer[] = [];
  private message: Buffer | null = null;

  /** `maxReadMessageLength`: -1 for no limit (grpc-js's constructor). */
  constructor(private readonly maxReadMessageLength: number) {}

  /** The messages `data` completes, each with its 5-byte prefix; throws on one over the limit
   *  (grpc-js answers RESOURCE_EXHAUSTED with the message). */
  write(data: Buffer): Buffer[] {
    const messages: Buffer[] = [];
    let at = 0;
    while (at < data.length) {
      if (this.prefixRead < PREFIX) {
        const n = Math.min(PREFIX - this.prefixRead, data.length - at);
        data.copy(this.prefix, this.prefixRead, at, at + n);
        at += n;
        this.prefixRead += n;
        if (this.prefixRead < PREFIX) break;
        this.size = this.prefix.readUInt32BE(1);
        if (this.maxReadMessageLength !== -1 && this.size > this.maxReadMessageLength)
          throw new Error(`Received message larger than max (${this.size} vs ${this.maxReadMessageLength})`);
        this.arrived = 0;
      }
      const n = Math.min(this.size - this.arrived, data.length - at);
      const frame = data.subarray(at, at + n);
      at += n;
      if (this.message) frame.copy(this.message, PREFIX + this.arrived);
      else this.frames.push(frame);
      this.arrived += n;
      if (!this.message && this.arrived * COMMIT_AT >= this.size) this.commit();
      if (this.arrived === this.size) {
        messages.push(this.message!);
        this.message = null;
        this.prefixRead = 0;
      }
    }
    return messages;
  }

  private commit(): void {
    const message = Buffer.allocUnsafe(PREFIX + this.size);
    let to = this.prefix.copy(message);
    for (const frame of this.frames) to += frame.copy(message, to);
    this.frames = [];
    this.message = message;
  }
}
