// The Open Inference Protocol over gRPC: inference.GRPCInferenceService (proto/grpc_predict_v2.proto,
// the published definition's names and numbers) with @grpc/grpc-js, on grpc_port beside HTTP in
// every front, answered by the same V2Service as /v2. Inputs come as raw_input_contents or typed
// contents; outputs go back as raw_output_contents. Errors carry the protocol's status codes:
// INVALID_ARGUMENT (a bad request), NOT_FOUND (a model not enabled), UNAVAILABLE (loading, busy),
// DEADLINE_EXCEEDED, INTERNAL.
import { constants, type Http2Server, type Http2Session, type ServerHttp2Stream } from 'node:http2';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from 'pino';
import { errors, ServiceError } from '../../lib/errors.js';
import type { InferRequest } from './inference.js';
import { MessageDecoder } from './message-decoder.js';
import { inferRequestDecoder, type TensorContents } from './tensor-contents.js';
import { overLimits } from './wire-limits.js';
import { type GrpcCall, v2Tiles } from '../plugins/usage.js';
import { shedOutcome, unanswered } from '../route-config.js';
import type { ShedOutcome } from '../../ipc/protocol.js';
import type { RequestBytes, Ticket } from '../backend.js';
import { ANSWER_PIECE, ANY_RATE } from '../pace.js';
import { rawBytes, type InputTensor, type Parameters } from './tensor-data.js';
import type { V2Service } from './v2-service.js';

export const PROTO_FILE = fileURLToPath(new URL('../../../../proto/grpc_predict_v2.proto', import.meta.url));

/** snake_case fields as the .proto names them; int64 as numbers (shapes, int64_param). */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
};

type Param = { parameter_choice?: 'bool_param' | 'int64_param' | 'string_param' } & Record<string, unknown>;
interface GrpcInput {
  name: string;
  datatype: string;
  shape: number[];
  parameters: Record<string, Param>;
  contents: TensorContents | null;
}

/** Bytes that are refused before they are a ModelInferRequest, and why. */
interface Malformed {
  malformed: string;
}

/** JSON cannot make a symbol key: the bytes a request was decoded from ride beside its fields. */
const MESSAGE: unique symbol = Symbol('ModelInferRequest message');

interface GrpcInferRequest {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Record<string, Param>;
  inputs: GrpcInput[];
  outputs: { name: string; parameters: Record<string, Param> }[];
  raw_input_contents: Buffer[];
  /** The bytes it was decoded from (requestDeserialize, below). */
  [MESSAGE]: Buffer;
}

/** What a ModelInferRequest's raw_input_contents are views of, to be freed once its tiles are
 *  answered (free-bytes.ts): grpc-js gathers each message's frames into one buffer, its gRPC
 *  prefix (5 bytes) and then the message, and decodes the message from behind the prefix; a
 *  buffer of just that holds nothing else. Otherwise the message itself (a decompressed one is
 *  a buffer of its own; a small one a slice of Node's pool, which freeBytes leaves alone). */
export function messageBuffer(message: Buffer): Uint8Array {
  const framed = message.byteOffset === 5 && message.buffer.byteLength === message.byteLength + 5;
  return framed ? new Uint8Array(message.buffer) : message;
}

/** Which InferTensorContents field holds a datatype's elements. */
const CONTENTS: Record<string, string> = {
  BOOL: 'bool_contents',
  INT8: 'int_contents',
  INT16: 'int_contents',
  INT32: 'int_contents',
  INT64: 'int64_contents',
  UINT8: 'uint_contents',
  UINT16: 'uint_contents',
  UINT32: 'uint_contents',
  UINT64: 'uint64_contents',
  FP32: 'fp32_contents',
  FP64: 'fp64_contents',
  BYTES: 'bytes_contents',
};

const STATUS: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  404: grpc.status.NOT_FOUND,
  503: grpc.status.UNAVAILABLE,
  504: grpc.status.DEADLINE_EXCEEDED,
};

const parameters = (map: Record<string, Param>): Parameters =>
  Object.fromEntries(Object.entries(map).map(([k, p]) => [k, p.parameter_choice ? p[p.parameter_choice] : undefined]));

/** What a request's tensors hold in the front while it runs, counted against its budget as an
 *  HTTP body is: raw contents as sent, typed contents as read (tensor-contents.ts: a UINT8 image
 *  in uint_contents a byte an element). */
function heldBytes(request: GrpcInferRequest): number {
  let bytes = request.raw_input_contents.reduce((sum, b) => sum + b.length, 0);
  for (const input of request.inputs)
    for (const values of Object.values(input.contents ?? {}))
      bytes += ArrayBuffer.isView(values)
        ? values.byteLength
        : (values as Buffer[]).reduce((sum, b) => sum + b.length, 0);
  return bytes;
}

/** A ModelInfer request as the transport-free InferRequest. */
export function toInferRequest(request: GrpcInferRequest): InferRequest {
  const raw = request.raw_input_contents;
  if (raw.length && raw.length !== request.inputs.length)
    throw errors.v2Invalid(
      `raw_input_contents has ${raw.length} entries, expected one per input (${request.inputs.length})`,
    );
  const inputs = request.inputs.map((input, i): InputTensor => {
    const { name, datatype, shape } = input;
    const common = { name, datatype, shape, parameters: parameters(input.parameters) };
    if (raw.length) {
      if (input.contents && Object.values(input.contents).some((v) => v.length))
        throw errors.v2Invalid(`input '${name}' has both contents and raw_input_contents: give one`);
      return { ...common, data: { raw: raw[i] } };
    }
    const field = CONTENTS[datatype];
    if (!field)
      throw errors.v2Invalid(
        `input '${name}' has datatype ${JSON.stringify(datatype)}, expected one of the protocol's (UINT8, FP32, BYTES, ...)`,
      );
    const elsewhere = Object.entries(input.contents ?? {}).find(([key, values]) => key !== field && values.length);
    if (elsewhere)
      throw errors.v2Invalid(
        `input '${name}' (${datatype}) has data in ${elsewhere[0]}, expected its elements in ${field} (or raw_input_contents)`,
      );
    return { ...common, data: { values: input.contents?.[field as keyof TensorContents] ?? [] } };
  });
  return {
    id: request.id || undefined,
    parameters: parameters(request.parameters),
    inputs,
    outputs: request.outputs.length ? request.outputs : undefined,
  };
}

/** Characters of a status message: it travels in the trailers, whose size clients bound (grpc-js:
 *  8 KiB of metadata), percent-encoded (up to 9 characters for one). A message quoting a 100 KB
 *  model name reached the client as INTERNAL, its status lost (an attack session). */
export const MAX_DETAILS = 600;

const clipped = (message: string): string =>
  message.length <= MAX_DETAILS
    ? message
    : `${message.slice(0, MAX_DETAILS)}... (${message.length - MAX_DETAILS} more characters)`;

/** Any error as a gRPC status with the protocol's message. */
function toStatus(err: unknown, logger: Logger): grpc.ServiceError {
  const error = ServiceError.from(err);
  const status = error.code === 'TILE_ERR_VALIDATION' || error.statusCode === 400 ? 400 : error.statusCode;
  if (error.code === 'TILE_ERR_INTERNAL') logger.error({ err, errorCode: error.code }, 'gRPC request failed');
  const details = error.code === 'TILE_ERR_INTERNAL' ? 'Internal server error' : clipped(error.message);
  const metadata = new grpc.Metadata();
  metadata.set('x-error-code', error.code);
  return Object.assign(new Error(details), {
    code: STATUS[status] ?? (status < 500 ? grpc.status.INVALID_ARGUMENT : grpc.status.INTERNAL),
    details,
    metadata,
  });
}

/** A unary handler from an async function; its errors become statuses. */
function unary<Req, Res>(
  logger: Logger,
  handle: (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res> | Res,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => handle(call.request, call))
      .then(
        (response) => callback(null, response),
        (err) => callback(toStatus(err, logger)),
      );
  };
}

/** Serves inference.GRPCInferenceService on host:port until the returned server is shut down. */
export async function startGrpc(
  service: V2Service,
  options: {
    host: string;
    port: number;
    maxMessageBytes: number;
    /** front.max_inflight_bytes: the bytes requests and answers hold, and so the calls held open. */
    maxInflightBytes: number;
    headersTimeoutMs: number;
    bodyTimeoutMs: number;
    /** Connections held at once (connectionLimit); more are closed as they come. */
    maxConnections: number;
    /** A connection without a call for this long is closed (GOAWAY): front.keep_alive_timeout_ms. */
    idleMs: number;
    logger: Logger;
    /** Told of each ModelInfer call when it is done (metrics and the usage log). */
    record?: (call: GrpcCall) => void;
  },
): Promise<{ server: grpc.Server; port: number }> {
  const definition = grpc.loadPackageDefinition(protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS)) as unknown as {
    inference: { GRPCInferenceService: { service: grpc.ServiceDefinition } };
  };
  decodeWhole();
  const methods = definition.inference.GRPCInferenceService.service;
  const infer = methods.ModelInfer!;
  const decode = inferRequestDecoder(PROTO_FILE, LOADER_OPTIONS);
  // Each ModelInferRequest keeps the bytes it was decoded from. One that is not a message, or
  // holds more entries than a request may (wire-limits.ts, counted before protobufjs builds them),
  // is answered INVALID_ARGUMENT by the handler: a deserializer that throws makes grpc-js answer
  // INTERNAL, a server fault.
  const requestDeserialize = (bytes: Buffer): GrpcInferRequest | Malformed => {
    const over = overLimits(bytes);
    if (over) return { malformed: `the request's ${over}` };
    try {
      return Object.assign(decode(bytes) as GrpcInferRequest, { [MESSAGE]: bytes });
    } catch (err) {
      return { malformed: `the request is not a ModelInferRequest message: ${(err as Error).message}` };
    }
  };
  const inferenceService = { ...methods, ModelInfer: { ...infer, requestDeserialize } };
  const { logger } = options;
  const server = new grpc.Server({
    'grpc.max_receive_message_length': options.maxMessageBytes,
    'grpc.max_send_message_length': -1,
    // grpc-js sets no limit, and a stream that sends no data holds no budget: 8 connections of
    // 170,000 empty streams each took a front's heap to its limit (an attack session).
    'grpc.max_concurrent_streams': MAX_STREAMS,
    // As HTTP lets an idle keep-alive connection go (grpc-js keeps it forever): 600 connections
    // that sent the preface and nothing else were held until their clients left, the file
    // descriptors past the front's limit.
    'grpc.max_connection_idle_ms': options.idleMs,
    // Channelz (call counts and traces per server and connection) is not served here; tracking it
    // cost each call ~0.04 ms of the front's main thread (a CPU profile at batch 32, about 1% of it).
    'grpc.enable_channelz': 0,
  });
  http2Settings(server, 'settings');
  // Set once the server is bound (holdAsHttp, below), before any call can come.
  let inferStream: (metadata: grpc.Metadata) => InferStream | undefined = () => undefined;
  server.addService(inferenceService, {
    ServerLive: unary(logger, () => ({ live: true })),
    ServerReady: unary(logger, () => ({ ready: service.ready() })),
    ModelReady: unary(logger, (r: { name: string; version: string }) => ({
      ready: service.modelReady(r.name, r.version || undefined),
    })),
    ServerMetadata: unary(logger, () => service.serverMetadata()),
    ModelMetadata: unary(logger, (r: { name: string; version: string }) =>
      service.modelMetadata(r.name, r.version || undefined),
    ),
    ModelInfer: unary(logger, async (r: GrpcInferRequest | Malformed, call) => {
      if ('malformed' in r) throw errors.v2Invalid(r.malformed);
      // Admitted as an HTTP request is, its bytes counted until it is answered (as they arrived:
      // holdAsHttp); its tiles cancelled when the call is. Counted in /metrics as endpoint "grpc",
      // with the status its HTTP twin would have had.
      const started = performance.now();
      let status = 200;
      let shed: ShedOutcome | undefined;
      let ticket: Ticket | undefined;
      // grpc-js also emits 'cancelled' once a call's status is sent: listened to until then only,
      // or each call would abort its tiles' listeners after the answer.
      const cancelled = new AbortController();
      const cancel = () => cancelled.abort();
      call.once('cancelled', cancel);
      try {
        ticket = service.admit(r.model_name, r.model_version || undefined);
        ticket.received(heldBytes(r));
        const response = await service.infer(r.model_name, r.model_version || undefined, toInferRequest(r), {
          ticket,
          signal: cancelled.signal,
          spent: messageBuffer(r[MESSAGE]),
        });
        // Which model answered, as REST's header: in the initial metadata, HTTP/2's response
        // headers, which clients read before the message (the trailers are the status's and
        // x-error-code's, sent whether or not there is an answer).
        const metadata = new grpc.Metadata();
        metadata.set('x-model-sha256', response.sha256);
        call.sendMetadata(metadata);
        return {
          model_name: response.model_name,
          model_version: response.model_version,
          id: response.id ?? '',
          parameters: { trained: { bool_param: response.parameters.trained } },
          outputs: response.outputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
          raw_output_contents: response.outputs.map(rawBytes),
        };
      } catch (err) {
        const error = cancelled.signal.aborted ? errors.cancelled() : ServiceError.from(err);
        status = error.statusCode;
        shed = shedOutcome(error.code);
        throw err;
      } finally {
        call.off('cancelled', cancel);
        ticket?.release();
        const entry = { model: r.model_name, status, shed, tile: v2Tiles(r) };
        const record = options.record;
        if (record) recordWhenSent(record, entry, started, status === 200 ? inferStream(call.metadata) : undefined);
      }
    }),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      `${options.host.includes(':') ? `[${options.host}]` : options.host}:${options.port}`,
      grpc.ServerCredentials.createInsecure(),
      (err, bound) => (err ? reject(err) : resolve(bound)),
    ),
  );
  http2Settings(server, 'sessions');
  boundHeaders(server, options.headersTimeoutMs);
  // One name may bind several addresses (localhost: ::1 and 127.0.0.1), a server each: they share it.
  const servers = http2Servers(server);
  for (const http2 of servers) http2.maxConnections = Math.max(1, Math.floor(options.maxConnections / servers.length));
  inferStream = holdAsHttp(server, service, { ...options, inferPath: infer.path });
  return { server, port };
}

/** Records a call once its answer is sent, as HTTP's usage entries are (route-config.ts): an
 *  answer the front let go of is 408 evicted, one whose client left before it was whole 499
 *  cancelled, whatever the handler answered. Without its stream (an error's answer), at once. */
function recordWhenSent(
  record: (call: GrpcCall) => void,
  entry: Omit<GrpcCall, 'ms'>,
  started: number,
  stream: InferStream | undefined,
): void {
  const done = (status: number, shed: ShedOutcome | undefined) =>
    record({ ...entry, status, shed, ms: performance.now() - started });
  if (!stream) return done(entry.status, entry.shed);
  void stream.closed.then((sent) => {
    const { status, shed } = stream.evicted || !sent ? unanswered(stream.evicted) : entry;
    done(status, shed);
  });
}

/** Calls open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS): more than a client
 *  keeps in flight (tritonclient and perf_analyzer share a channel across their concurrency),
 *  nginx's default 128 doubled. */
export const MAX_STREAMS = 256;

/** HTTP/2 receive window of a stream and of a connection. */
const WINDOW = 16 * 1024 * 1024;

/** grpc-js's server keeps HTTP/2's 64 KiB receive windows, with no option to raise them (its
 *  client has grpc-node.flow_control_window; the server's is grpc/grpc-node pull request 3058,
 *  open): a batch of 32 tiles, 4.8 MB, then crosses in 64 KiB steps, each waiting for a window
 *  update. Until that lands, the server's own settings (before bind) and each connection's window
 *  (after) are raised here, through its internals; a grpc-js without them keeps the default. The
 *  header-list bounds (MAX_HEADER_LIST, MAX_HEADER_PAIRS) go into the same settings. */
function http2Settings(server: grpc.Server, step: 'settings' | 'sessions'): void {
  const internals = server as unknown as {
    commonServerOptions?: { settings?: Record<string, unknown>; maxHeaderListPairs?: number };
  };
  if (step === 'settings' && internals.commonServerOptions) {
    internals.commonServerOptions.settings = {
      ...internals.commonServerOptions.settings,
      initialWindowSize: WINDOW,
      maxHeaderListSize: MAX_HEADER_LIST,
    };
    internals.commonServerOptions.maxHeaderListPairs = MAX_HEADER_PAIRS;
  }
  if (step === 'sessions') onSession(server, (s) => s.setLocalWindowSize(WINDOW));
}

/** The most a call's header list may hold (RFC 9113 6.5.2: names, values and 32 bytes a field),
 *  gRPC core's hard limit on metadata. grpc-js sets none: a 225-byte header block naming one
 *  4 KB HPACK table entry 120 times (RFC 7541 2.3.2) decoded to 480 KB, and 10,000 such calls
 *  held on a closed window took a front to 4.3 GB and killed it (heap out of memory in 14 s: an
 *  attack session). Sent as SETTINGS_MAX_HEADER_LIST_SIZE, which Node enforces (RST_STREAM
 *  ENHANCE_YOUR_CALM) once the client has acknowledged it (RFC 9113 6.5.3). */
export const MAX_HEADER_LIST = 16 * 1024;

/** The most fields a call's header list may hold, pseudo-headers included (Node's default is
 *  128): Envoy's default, so that a call that crossed a mesh's proxies fits. Node holds every call
 *  to it from the first byte, acknowledged or not, in its own code: HPACK can make a field as
 *  large as the client's table (4 KB), so this bounds what a header block can decode to before any
 *  of ours runs. */
export const MAX_HEADER_PAIRS = 100;

/** Holds every call to MAX_HEADER_LIST: a client that has not acknowledged the server's SETTINGS
 *  within `ackMs` (front.headers_timeout_ms; a client acknowledges at once) is let go of (GOAWAY
 *  SETTINGS_TIMEOUT, RFC 9113 6.5.3), and until then each call's header list is measured here and
 *  reset past it, once grpc-js has its call (before, grpc-js answered some such streams, a wrong
 *  content type or path, on the closed stream, and Node's throw took the front down: a review
 *  session). */
function boundHeaders(server: grpc.Server, ackMs: number): void {
  onSession(server, (session) => {
    // A session already gone (a client's GOAWAY destroys it before its socket closes) takes no
    // GOAWAY: Node would throw. (Node's destroy(undefined, code) sends NO_ERROR whatever the code.)
    const deadline = setTimeout(() => {
      if (session.destroyed) return;
      if (!session.closed) session.goaway(constants.NGHTTP2_SETTINGS_TIMEOUT);
      session.destroy();
    }, ackMs);
    session.once('localSettings', () => clearTimeout(deadline));
    session.once('close', () => clearTimeout(deadline));
    session.on('stream', (stream, _headers, _flags, raw: string[]) => {
      let size = 0;
      for (let i = 0; i < raw.length; i += 2) size += raw[i]!.length + raw[i + 1]!.length + 32;
      if (size > MAX_HEADER_LIST) stream.close(constants.NGHTTP2_ENHANCE_YOUR_CALM);
    });
  });
}

/** Each call's messages read by MessageDecoder (message-decoder.ts) instead of grpc-js's own:
 *  through grpc-js's module, from which each call constructs its decoder (a grpc-js that moved
 *  it keeps its own). */
function decodeWhole(): void {
  const require = createRequire(import.meta.url);
  let decoders: { StreamDecoder?: unknown };
  try {
    decoders = require('@grpc/grpc-js/build/src/stream-decoder.js');
  } catch {
    return;
  }
  if (typeof decoders.StreamDecoder === 'function') decoders.StreamDecoder = MessageDecoder;
}

/** The HTTP/2 servers of a bound grpc-js server, through its internals (none when they change). */
function http2Servers(server: grpc.Server): Http2Server[] {
  const internals = server as unknown as { http2Servers?: Map<Http2Server, unknown> };
  return [...(internals.http2Servers?.keys() ?? [])];
}

/** Each HTTP/2 connection of a bound grpc-js server. */
function onSession(server: grpc.Server, listener: (session: Http2Session) => void): void {
  for (const http2 of http2Servers(server)) http2.on('session', listener);
}

/** A call is held as an HTTP request is: its request's bytes count against the front's budget
 *  (front.max_inflight_bytes) as they arrive (holdRequest) and its answer until taken
 *  (holdAnswer); a stream past the budget is refused (REFUSED_STREAM: not processed, a client may
 *  retry; gRPC's UNAVAILABLE). Open calls are bounded apart from it (CALL_BYTES): a call that
 *  sends nothing costs the front memory but holds no bytes. Calls other than `inferPath` (health,
 *  metadata) have as many places of their own, and a reserve as large as the budget: answered,
 *  as HTTP's health routes are, while requests hold the budget whole, and unable to take model
 *  calls' places (an attack session held 33,000 ServerLive calls on a closed window, and model
 *  calls were refused), CONTROL_STREAMS a connection at most. Their answers, a few bytes, are let
 *  go of when not taken within front.headers_timeout_ms, not the body timeout. */
function holdAsHttp(
  server: grpc.Server,
  service: V2Service,
  { inferPath, maxInflightBytes, headersTimeoutMs, bodyTimeoutMs }: HoldOptions,
): (metadata: grpc.Metadata) => InferStream | undefined {
  const maxCalls = Math.max(1, Math.floor(maxInflightBytes / CALL_BYTES));
  const open = { control: 0, infer: 0 };
  const calls = new Map<string, InferStream>();
  const streams = new WeakMap<ServerHttp2Stream, InferStream>();
  let next = 0;
  onSession(server, (session) => {
    // Before grpc-js's own listener, which reads the headers into the call's metadata.
    session.prependListener('stream', (stream, headers) => {
      if (headers[':path'] !== inferPath) return;
      const id = String(next++);
      headers[INFER_STREAM_KEY] = id;
      const closed = new Promise<boolean>((resolve) =>
        stream.once('close', () => {
          calls.delete(id);
          resolve(stream.rstCode === constants.NGHTTP2_NO_ERROR);
        }),
      );
      const held = { evicted: false, closed };
      calls.set(id, held);
      streams.set(stream, held);
    });
    let controlHere = 0;
    session.on('stream', (stream, headers) => {
      const control = headers[':path'] !== inferPath;
      const kind = control ? 'control' : 'infer';
      if (open[kind] >= maxCalls || (control && controlHere >= CONTROL_STREAMS))
        return void stream.close(constants.NGHTTP2_REFUSED_STREAM);
      open[kind]++;
      if (control) controlHere++;
      stream.once('close', () => {
        open[kind]--;
        if (control) controlHere--;
      });
      // A client that falls behind its pace, sending or taking, while others need the budget.
      const evict = () => {
        const held = streams.get(stream);
        if (held) held.evicted = true;
        cancel(stream)();
      };
      holdRequest(
        stream,
        service.requestBytes(control, { evict, rate: ANY_RATE }),
        headersTimeoutMs,
        bodyTimeoutMs,
        control ? CONTROL_BYTES : Infinity,
      );
      holdAnswer(stream, () => service.requestBytes(control, { evict }), control ? headersTimeoutMs : bodyTimeoutMs);
    });
  });
  return (metadata) => calls.get(String(metadata.get(INFER_STREAM_KEY)[0]));
}

/** An infer call's stream, as its usage entry needs it: grpc-js gives a handler no way to its
 *  stream, so holdAsHttp stamps each infer stream's headers with INFER_STREAM_KEY (over any value
 *  a client sent) before grpc-js reads them into the call's metadata. */
interface InferStream {
  /** Let go of by the front: its client fell behind its pace while others needed the budget. */
  evicted: boolean;
  /** Its close: whether it ended as it should (its answer sent whole, NO_ERROR). */
  closed: Promise<boolean>;
}
const INFER_STREAM_KEY = 'tile-infer-stream';

/** Resets the stream: the call is let go of (gRPC's CANCELLED). */
const cancel = (stream: ServerHttp2Stream) => () => stream.close(constants.NGHTTP2_CANCEL);

interface HoldOptions {
  inferPath: string;
  maxInflightBytes: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
}

/** What an open call costs a front before it sends a byte (its HTTP/2 stream and grpc-js's call):
 *  400 connections of 256 calls that sent only their headers took a front from 126 to 928 MB,
 *  8 KB a call (an ad hoc attack); held with an answer on a closed window, 15 KB (an attack
 *  session: 65,000 ServerLive calls, 1,143 MB). A front holds front.max_inflight_bytes /
 *  CALL_BYTES model calls open (16,384 by default) and as many others, that much memory again.
 *  Charged to the byte budget instead (c3e0c17), such calls shut out every model request, HTTP's
 *  too: 130 connections of them did (an attack session). */
export const CALL_BYTES = 16 * 1024;

/** Health and metadata calls one connection may hold open at once. A client asks them one or
 *  a few at a time; an attack session held 250 a connection on closed windows (their answers
 *  never sent), and from 66 connections every place such calls have was taken, gRPC health
 *  probes refused (31 of 61) for as long as it held them. Letting the furthest behind give way
 *  only made room for more of the attacker's calls (probes 39 of 66, the front busier). Bounded
 *  per connection, filling the places takes front.max_inflight_bytes / CALL_BYTES / 32
 *  connections (512 at the defaults). */
export const CONTROL_STREAMS = 32;

/** The largest message of a call that asks no model (a name and a version; with the reserve, so
 *  that the reserve is not a second budget for large messages). */
const CONTROL_BYTES = 64 * 1024;

/** A call's request counts as it arrives, until all of it has (then its ticket holds it until the
 *  handler is done: ModelInfer, above), up to `maxBytes` (past it the stream is reset). Its message must begin within `headersMs`
 *  (front.headers_timeout_ms: its prefix says what is coming, as an HTTP request's headers do)
 *  and have arrived within `bodyMs` (front.body_timeout_ms, Node's requestTimeout for HTTP, a
 *  408), or its stream is reset (CANCEL). grpc-js has neither: 16 streams that sent 15 MB each of
 *  a 16 MB message and stalled were held, 252 MB outside the budget, until their clients left. */
function holdRequest(
  stream: ServerHttp2Stream,
  bytes: RequestBytes,
  headersMs: number,
  bodyMs: number,
  maxBytes: number,
): void {
  const begun = setTimeout(cancel(stream), headersMs);
  stream.on('data', (chunk: Buffer) => {
    clearTimeout(begun);
    if (bytes.bytes() + chunk.length > maxBytes) return cancel(stream)();
    try {
      bytes.received(chunk.length);
    } catch {
      stream.close(constants.NGHTTP2_REFUSED_STREAM);
    }
  });
  const timer = setTimeout(cancel(stream), bodyMs);
  const arrived = () => {
    clearTimeout(begun);
    clearTimeout(timer);
    bytes.release();
  };
  stream.once('end', arrived);
  stream.once('close', arrived);
}

/** A call's answer counts against the front's budget until its client has taken it, whatever
 *  the budget (the work is done; past it, new requests are refused until it is taken, or until
 *  its client falls behind its pace: pace.ts), and is written in pieces, each once the last is
 *  taken (what HTTP/2's flow control lets through, at the client's pace, which each piece taken
 *  tells the budget): a piece not taken within `ms` (front.body_timeout_ms) resets the stream
 *  (CANCEL). grpc-js writes an answer whole whatever its client reads: 4 connections of 256
 *  streams that opened no window, each call 8 blank 512 px tiles asking for their masks (12 KB
 *  in, 2 MB out), took a front from 209 to 736 MB in a minute, growing at the model's rate (an ad
 *  hoc attack). Paced, a client reading slowly but steadily keeps its stream however long the
 *  answer takes. grpc-js writes a unary answer's message in one write, and its status after it. */
function holdAnswer(stream: ServerHttp2Stream, hold: () => RequestBytes, ms: number): void {
  const write = stream.write.bind(stream) as (chunk: Uint8Array, done: (err?: Error | null) => void) => boolean;
  let timer: NodeJS.Timeout | undefined;
  // Held from the answer's first write: its client's pace counts from there, not from the call's
  // start (the time its model took is not the client's).
  let bytes: RequestBytes | undefined;
  stream.write = ((chunk: Buffer, ...rest: unknown[]) => {
    const done = rest.find((r) => typeof r === 'function') as ((err?: Error | null) => void) | undefined;
    const held = (bytes ??= hold());
    held.held(chunk.length);
    timer ??= setTimeout(cancel(stream), ms);
    let at = 0;
    let piece = 0;
    const next = (err?: Error | null): void => {
      held.taken(piece);
      if (err || at >= chunk.length) return void done?.(err);
      timer!.refresh();
      const written = chunk.subarray(at, (at += ANSWER_PIECE));
      piece = written.length;
      write(written, next);
    };
    next();
    return true;
  }) as ServerHttp2Stream['write'];
  stream.once('close', () => {
    clearTimeout(timer);
    bytes?.release();
  });
}
