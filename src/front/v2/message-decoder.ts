// gRPC's length-prefixed messages (PROTOCOL-HTTP2.md: a compressed flag, a 4-byte big-endian
// length, the message) read from a call's DATA frames, in place of grpc-js's StreamDecoder, whose
// output it matches. grpc-js keeps every frame of a message until the last one arrives and then
// joins them. Each frame is a view of one of Node's HTTP/2 socket reads, and the calls of a
// connection share them: a 64 KiB read holds frames of several calls and lives until the slowest
// of them is whole. At c=16 that outlived the scavenges, so the reads were promoted, where only a
// mark-compact frees them; V8 starts one each time 64 MB more of such memory is alive. gRPC
// batches of 32 tiles: 54-66 mark-compacts in 13 s against v2 binary's 7, and the front's CPU a
// tile 0.30 ms against 0.20 (docs/open-inference-protocol.md). Here each frame is copied into the
// message's own buffer as it comes, and the reads die young. The buffer doubles as the message
// arrives and takes the message's whole declared length once a quarter of it is in, each
// outgrown buffer freed at once (free-bytes.ts): it holds at most four times what the client has
// sent (whose bytes count against the front's budget; the pages not yet written are not resident),
// a length prefix alone allocates nothing, and a frame of one byte holds one byte, not a view of
// its read. Against joining frame views at the end, the copies add at most half the message.
import { freeBytes } from '../free-bytes.js';

const PREFIX = 5;
/** A message's buffer doubles until 1/WHOLE_AT of it has arrived, then takes its whole length:
 *  doubling all the way (at most twice what has arrived) cost the front 0.25-0.26 CPU-ms a tile
 *  of gRPC at 32 against 0.22-0.24 this way (alternated runs). */
export const WHOLE_AT = 4;

export class MessageDecoder {
  private readonly prefix = Buffer.alloc(PREFIX);
  private prefixRead = 0;
  /** The message's length, how much of it has arrived, and its buffer (prefix first). */
  private size = 0;
  private arrived = 0;
  private message: Buffer | null = null;
  /** A message over the limit, or compressed, ends the call: every later write throws it again. */
  private refused: Error | null = null;

  /** `maxReadMessageLength`: -1 for no limit (grpc-js's constructor). */
  constructor(private readonly maxReadMessageLength: number) {}

  /** The messages `data` completes, each with its 5-byte prefix; throws on one over the limit or
   *  compressed (grpc-js answers RESOURCE_EXHAUSTED with the message). */
  write(data: Buffer): Buffer[] {
    if (this.refused) throw this.refused;
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
          this.refused = new Error(`Received message larger than max (${this.size} vs ${this.maxReadMessageLength})`);
        // grpc-js would inflate it to the limit, where only its compressed bytes count against the
        // front's budget: 100 calls of a 16 KB gzip that inflates to 16 MiB held 2 GB (an attack
        // session). Tiles, PNG or raw pixels, gain little from it.
        else if (this.prefix[0] !== 0)
          this.refused = new Error(
            `Received a compressed message (flag ${this.prefix[0]}): this server takes messages uncompressed (grpc-encoding identity)`,
          );
        if (this.refused) throw this.refused;
        this.arrived = 0;
      }
      const n = Math.min(this.size - this.arrived, data.length - at);
      if (n === 0 && this.size > 0) break; // the prefix alone: nothing to hold yet
      const message = this.room(PREFIX + this.arrived + n);
      data.copy(message, PREFIX + this.arrived, at, at + n);
      this.arrived += n;
      at += n;
      if (this.arrived === this.size) {
        messages.push(message);
        this.message = null;
        this.prefixRead = 0;
      }
    }
    return messages;
  }

  /** The message's buffer, with room for `bytes`: the first holds the prefix. */
  private room(bytes: number): Buffer {
    const held = this.message;
    if (held && held.length >= bytes) return held;
    const whole = PREFIX + this.size;
    const grown = Buffer.allocUnsafeSlow(WHOLE_AT * bytes >= whole ? whole : 2 * bytes);
    if (held) {
      held.copy(grown, 0, 0, PREFIX + this.arrived);
      freeBytes(held);
    } else this.prefix.copy(grown);
    this.message = grown;
    return grown;
  }
}
