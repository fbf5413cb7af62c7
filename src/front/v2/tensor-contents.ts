// gRPC's InferTensorContents read into typed arrays. protobufjs reads a packed repeated scalar into
// a JS array one element at a time (8 bytes an element, grown by doubling), and proto-loader's
// toObject copies that into another: a 512 px tile in uint_contents, 0.8-1.5 MB on the wire,
// became 6.3 MB held, several times that in garbage and 24.5 ms of the front's main thread (6.0
// here), and 800 such calls, 40 a second, took a front to 1.7 GB (docs/operations.md). Here each
// numeric field is counted on the wire first, then read once into a typed array of its size:
// uint_contents as bytes while every value fits in one (a UINT8 image as clients send it), int64
// and uint64 as numbers (as proto-loader's `longs: Number` gave them), bool as 0 and 1. Packed
// and unpacked encodings are both read (proto3 parsers must accept either); an element whose wire
// type is not its field's is refused.
import protobuf from 'protobufjs';

export interface TensorContents {
  bool_contents: Uint8Array;
  int_contents: Int32Array;
  int64_contents: Float64Array;
  uint_contents: Uint8Array | Uint32Array;
  uint64_contents: Float64Array;
  fp32_contents: Float32Array;
  fp64_contents: Float64Array;
  bytes_contents: Buffer[];
}

type NumericName = Exclude<keyof TensorContents, 'bytes_contents'>;

const VARINT = 0;
const FIXED64 = 1;
const LENGTH_DELIMITED = 2;
const FIXED32 = 5;

interface Field {
  /** Its field number, which indexes the counts. */
  number: number;
  name: NumericName;
  /** The wire type of one element. */
  wire: typeof VARINT | typeof FIXED64 | typeof FIXED32;
  read(reader: protobuf.Reader): number;
}

/** A 64-bit varint as a number, as protobufjs' toObject gives it with `longs: Number` (past 2^53
 *  the nearest double). */
const toNumber = (long: number | { low: number; high: number }, unsigned: boolean): number =>
  typeof long === 'number' ? long : new protobuf.util.LongBits(long.low >>> 0, long.high >>> 0).toNumber(unsigned);

/** The numeric fields by number (proto/grpc_predict_v2.proto); 8 is bytes_contents. */
const FIELDS: Record<number, Field> = {
  1: { number: 1, name: 'bool_contents', wire: VARINT, read: (r) => (r.bool() ? 1 : 0) },
  2: { number: 2, name: 'int_contents', wire: VARINT, read: (r) => r.int32() },
  3: { number: 3, name: 'int64_contents', wire: VARINT, read: (r) => toNumber(r.int64(), false) },
  4: { number: 4, name: 'uint_contents', wire: VARINT, read: (r) => r.uint32() },
  5: { number: 5, name: 'uint64_contents', wire: VARINT, read: (r) => toNumber(r.uint64(), true) },
  6: { number: 6, name: 'fp32_contents', wire: FIXED32, read: (r) => r.float() },
  7: { number: 7, name: 'fp64_contents', wire: FIXED64, read: (r) => r.double() },
};
const BYTES_FIELD = 8;

type Numbers = TensorContents[NumericName];

const ARRAYS: Record<NumericName, new (length: number) => Numbers> = {
  bool_contents: Uint8Array,
  int_contents: Int32Array,
  int64_contents: Float64Array,
  // Widened to Uint32Array at the first value past 255.
  uint_contents: Uint8Array,
  uint64_contents: Float64Array,
  fp32_contents: Float32Array,
  fp64_contents: Float64Array,
};

/** What a walk over a message does with each field: a packed run of a numeric field (the reader
 *  at its first byte, `end` past its last), one unpacked element (the reader at its value), a
 *  bytes_contents element (the reader at its length). Each leaves the reader past what it got. */
interface Visit {
  packed(field: Field, end: number): void;
  element(field: Field): void;
  bytes(): void;
}

/** Walks the fields from the reader's position to `end`, refusing an element whose wire type is
 *  not its field's and a run past the end; unknown fields are skipped. */
function walk(reader: protobuf.Reader, end: number, visit: Visit): void {
  while (reader.pos < end) {
    const tag = reader.uint32();
    const [number, wire] = [tag >>> 3, tag & 7];
    const field = FIELDS[number];
    if (number === BYTES_FIELD && wire === LENGTH_DELIMITED) visit.bytes();
    else if (field && wire === LENGTH_DELIMITED) {
      const size = reader.uint32();
      if (reader.pos + size > end) throw new RangeError(`${field.name}: a packed run past the end of its message`);
      visit.packed(field, reader.pos + size);
    } else if (field && wire === field.wire) visit.element(field);
    else if (field || number === BYTES_FIELD)
      throw new TypeError(`${field?.name ?? 'bytes_contents'}: wire type ${wire}, not the field's`);
    else reader.skipType(wire);
  }
  if (reader.pos > end) throw new RangeError('InferTensorContents: a field past the end of its message');
}

/** Decodes an InferTensorContents from `reader`, `length` bytes of it (all that is left when not
 *  given); throws naming what is malformed, as protobufjs does. Two walks over the message, the
 *  first counting each field's elements, the second reading them into arrays of that size; nothing
 *  is kept per run or element in between: unpacked elements, 2 bytes each, had been a run object
 *  each, 8.4 million of them for a 16 MiB message and seconds of a front's main thread (an attack
 *  session). */
export function decodeTensorContents(reader: protobuf.Reader, length?: number): TensorContents {
  const start = reader.pos;
  const end = length === undefined ? reader.len : start + length;
  // Before anything is counted: a length of 4 GB in a 12-byte message had its runs counted, byte
  // by byte, far past the buffer (a review session: 10 s of the front's main thread a call).
  if (end > reader.len) throw new RangeError('InferTensorContents: longer than the message holding it');
  const counts = new Array<number>(BYTES_FIELD).fill(0);
  const bytes: Buffer[] = [];
  walk(reader, end, {
    packed(field, runEnd) {
      counts[field.number] += packedCount(field, reader.buf, reader.pos, runEnd);
      reader.pos = runEnd;
    },
    element(field) {
      counts[field.number]++;
      reader.skipType(field.wire);
    },
    bytes: () => bytes.push(reader.bytes() as Buffer),
  });
  const contents = Object.fromEntries(
    Object.values(FIELDS).map((field) => [field.name, new ARRAYS[field.name](counts[field.number])]),
  ) as unknown as TensorContents;
  const filled = new Array<number>(BYTES_FIELD).fill(0);
  /** Reads the field's elements until the reader is at `until`. */
  const fill = (field: Field, until: number) => {
    let values = contents[field.name] as Numbers;
    let at = filled[field.number];
    const word = WORD.has(field.name);
    const { buf } = reader;
    while (reader.pos < until) {
      const p = reader.pos;
      const value =
        word && buf[p]! > 0x7f && buf[p + 1]! > 0x7f && buf[p + 2]! > 0x7f && buf[p + 3]! > 0x7f && buf[p + 4]! > 0x7f
          ? readLongWord(field, reader)
          : field.read(reader);
      if (values instanceof Uint8Array && field.name === 'uint_contents' && value > 255)
        values = contents.uint_contents = Uint32Array.from(values);
      values[at++] = value;
    }
    filled[field.number] = at;
  };
  reader.pos = start;
  walk(reader, end, {
    packed: fill,
    // Every element takes a byte or more: one is read.
    element: (field) => fill(field, reader.pos + 1),
    bytes: () => reader.skipType(LENGTH_DELIMITED),
  });
  const short = Object.values(FIELDS).find((f) => filled[f.number] !== counts[f.number]);
  if (short)
    throw new RangeError(`${short.name}: read ${filled[short.number]} elements of the ${counts[short.number]} counted`);
  contents.bytes_contents = bytes;
  return contents;
}

/** Fields read with protobufjs' uint32 (bool, int32, uint32). */
const WORD = new Set<NumericName>(['bool_contents', 'int_contents', 'uint_contents']);

/** An element of a 32-bit field (WORD) whose varint goes on past 5 bytes. protobufjs reads such
 *  a varint's first 5 bytes and then steps a fixed 5 more (int32's negatives take 10): one written
 *  in 6 to 9 bytes (legal: parsers take up to 10) then ends elsewhere than at its last byte, where
 *  the count found it, or past the message (a review: zeros filled in, or a throw). It is read
 *  from its first 5 bytes, the value's 32 bits, and passed over to its end. */
function readLongWord(field: Field, reader: protobuf.Reader): number {
  const first = Uint8Array.from(reader.buf.subarray(reader.pos, reader.pos + 5));
  first[4]! &= 0x7f;
  reader.skipType(VARINT);
  return field.read(protobuf.Reader.create(first));
}

/** Elements in a packed run of `field`, from start to end of `buf`: throws when the run does not
 *  hold whole elements. */
function packedCount(field: Field, buf: Uint8Array, start: number, end: number): number {
  const size = end - start;
  if (field.wire === VARINT) {
    if (size > 0 && buf[end - 1]! >= 0x80) throw new RangeError(`${field.name}: a varint cut off at its run's end`);
    let n = 0;
    for (let i = start; i < end; i++) if (buf[i]! < 0x80) n++;
    return n;
  }
  const width = field.wire === FIXED32 ? 4 : 8;
  if (size % width !== 0)
    throw new RangeError(`${field.name}: a packed run of ${size} bytes, not whole ${width}-byte values`);
  return size / width;
}

/** ModelInferRequest's decoder as proto-loader makes it (protobufjs' decode, then toObject with
 *  the loader's options), its tensors' contents read by decodeTensorContents. */
export function inferRequestDecoder(
  protoFile: string,
  options: protobuf.IConversionOptions & { keepCase?: boolean },
): (bytes: Uint8Array) => unknown {
  const root = new protobuf.Root().loadSync(protoFile, { keepCase: options.keepCase });
  const contents = root.lookupType('inference.InferTensorContents');
  contents.decode = ((from: protobuf.Reader | Uint8Array, length?: number) =>
    decodeTensorContents(from instanceof protobuf.Reader ? from : protobuf.Reader.create(from), length)) as never;
  // Left as they are: protobufjs' toObject would copy each into a JS array.
  contents.toObject = ((decoded: TensorContents) => decoded) as never;
  const request = root.lookupType('inference.ModelInferRequest');
  return (bytes) => request.toObject(request.decode(bytes), options);
}
