// gRPC as grpc/grpc's PROTOCOL-HTTP2.md puts it on HTTP/2, for tests that must send what a gRPC
// library would not: a ModelInfer call's stream (a POST of application/grpc with `te: trailers`),
// and a message with its 5-byte prefix (a compressed flag, then the length, big-endian).
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';

export const MODEL_INFER = '/inference.GRPCInferenceService/ModelInfer';

export const SERVER_LIVE = '/inference.GRPCInferenceService/ServerLive';

/** A call to `path` opened on `session`, its errors left to its close (rstCode). */
export function callStream(session: ClientHttp2Session, path: string): ClientHttp2Stream {
  const stream = session.request({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  stream.on('error', () => {});
  return stream;
}

/** A ModelInfer call opened on `session`. */
export const modelInferStream = (session: ClientHttp2Session): ClientHttp2Stream => callStream(session, MODEL_INFER);

/** The prefix of an uncompressed message of `length` bytes. */
export function messagePrefix(length: number): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(length, 1);
  return prefix;
}

/** A message as it travels: its prefix, then it. */
export const framed = (message: Buffer): Buffer => Buffer.concat([messagePrefix(message.length), message]);
