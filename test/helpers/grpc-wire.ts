// gRPC as grpc/grpc's PROTOCOL-HTTP2.md puts it on HTTP/2, for tests that must send what a gRPC
// library would not: a ModelInfer call's stream (a POST of application/grpc with `te: trailers`),
// and a message with its 5-byte prefix (a compressed flag, then the length, big-endian).
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';

export const MODEL_INFER = '/inference.GRPCInferenceService/ModelInfer';

/** A ModelInfer call opened on `session`, its errors left to its close (rstCode). */
export function modelInferStream(session: ClientHttp2Session): ClientHttp2Stream {
  const stream = session.request({
    ':method': 'POST',
    ':path': MODEL_INFER,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  stream.on('error', () => {});
  return stream;
}

/** The prefix of an uncompressed message of `length` bytes. */
export function messagePrefix(length: number): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(length, 1);
  return prefix;
}

/** A message as it travels: its prefix, then it. */
export const framed = (message: Buffer): Buffer => Buffer.concat([messagePrefix(message.length), message]);
