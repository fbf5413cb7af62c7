// HTTP/2 as RFC 9113 writes it, frame by frame, with HPACK (RFC 7541) literals and indexes: for
// tests that must send what no HTTP/2 library would (SETTINGS left unacknowledged, a header block
// that references one table entry many times), and read each frame the server sends back.
import net from 'node:net';

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
export const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, GOAWAY: 7 } as const;
export const FLAG = { END_STREAM: 1, ACK: 1, END_HEADERS: 4 } as const;

/** A frame: its 9-byte header (length, type, flags, stream), then its payload. */
export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([header, payload]);
}

/** An HPACK integer with an `bits`-bit prefix (RFC 7541 5.1), its first byte ORed with `mask`. */
function integer(value: number, bits: number, mask: number): Buffer {
  const max = (1 << bits) - 1;
  if (value < max) return Buffer.from([mask | value]);
  const out = [mask | max];
  for (value -= max; value >= 128; value = Math.floor(value / 128)) out.push((value % 128) + 128);
  out.push(value);
  return Buffer.from(out);
}

const text = (s: string) => {
  const bytes = Buffer.from(s);
  return Buffer.concat([integer(bytes.length, 7, 0), bytes]);
};

/** A literal field with a new name (RFC 7541 6.2): `indexed`, with incremental indexing (it enters
 *  the dynamic table, at index 62 once it is the newest). */
export const literal = (name: string, value: string, indexed = false): Buffer =>
  Buffer.concat([Buffer.from([indexed ? 0x40 : 0x00]), text(name), text(value)]);

/** A field named by its table index (RFC 7541 6.1). */
export const indexed = (index: number): Buffer => integer(index, 7, 0x80);

/** The header block of a gRPC call to `path`. */
export const callHeaders = (path: string): Buffer =>
  Buffer.concat([
    literal(':method', 'POST'),
    literal(':scheme', 'http'),
    literal(':path', path),
    literal(':authority', 'x'),
    literal('content-type', 'application/grpc'),
    literal('te', 'trailers'),
  ]);

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

/** A connection that has sent the preface and an empty SETTINGS, and keeps every frame it reads
 *  (`allowHalfOpen`: it keeps its half open when the server ends its own). */
export async function rawConnection(
  port: number,
  { allowHalfOpen = false } = {},
): Promise<{ socket: net.Socket; frames: Frame[]; closed: () => boolean }> {
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen });
  socket.on('error', () => {});
  const frames: Frame[] = [];
  let closed = false;
  let pending = Buffer.alloc(0);
  socket.on('close', () => (closed = true));
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
      const length = pending.readUIntBE(0, 3);
      frames.push({
        type: pending[3]!,
        flags: pending[4]!,
        stream: pending.readUInt32BE(5) & 0x7fffffff,
        payload: pending.subarray(9, 9 + length),
      });
      pending = pending.subarray(9 + length);
    }
  });
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
  return { socket, frames, closed: () => closed };
}
