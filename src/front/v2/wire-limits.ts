// What a ModelInferRequest may hold, checked on its wire format before protobufjs decodes it.
// protobufjs builds an object for every element of a repeated message or bytes field, on the
// front's main thread: a 16 MiB message of 8.4 million empty inputs (two bytes each) took a front
// to 3 GB and stopped it for 9 s, HTTP included, answered INVALID_ARGUMENT only at the end (an
// attack session). Counted here with protobufjs' Reader, which skips each field by its length,
// so a legitimate request (a few inputs, their pixels in one bytes field) costs a few reads.
import protobuf from 'protobufjs/minimal.js';

/** Entries a request may have of each repeated field: a model has a handful of inputs and
 *  outputs; a BYTES input holds a batch's PNG files. */
export const WIRE_LIMITS = {
  tensors: 64,
  parameters: 64,
  dims: 16,
  bytesElements: 4096,
};

/** A field counted here: its name, the most entries it may have, and whether it is a packed
 *  repeated scalar (its entries are varints in one length-delimited field). */
type Limit = [name: string, max: number, packed?: 'packed'];

/** The ModelInferRequest fields (proto/grpc_predict_v2.proto) counted here, by number. */
const REQUEST: Record<number, Limit> = {
  4: ['parameters', WIRE_LIMITS.parameters],
  5: ['inputs', WIRE_LIMITS.tensors],
  6: ['outputs', WIRE_LIMITS.tensors],
  7: ['raw_input_contents', WIRE_LIMITS.tensors],
};
const INPUT: Record<number, Limit> = {
  3: ['shape', WIRE_LIMITS.dims, 'packed'],
  4: ['parameters', WIRE_LIMITS.parameters],
};
const OUTPUT: Record<number, Limit> = { 2: ['parameters', WIRE_LIMITS.parameters] };
const CONTENTS: Record<number, Limit> = { 8: ['bytes_contents', WIRE_LIMITS.bytesElements] };

/** The most bytes of a varint (a 64-bit value). */
const VARINT_BYTES = 10;

const LENGTH_DELIMITED = 2;

/** Why `message` holds more than a request may (the field and the most it may have), or null;
 *  null too for bytes that are not a message, which protobufjs then refuses with its reason. */
export function overLimits(message: Uint8Array): string | null {
  try {
    return scan(protobuf.Reader.create(message), message.length, REQUEST, '', (field, reader, end, at) => {
      if (field === 5)
        return scan(reader, end, INPUT, `inputs[${at}].`, nested(5, CONTENTS, `inputs[${at}].contents.`));
      if (field === 6) return scan(reader, end, OUTPUT, `outputs[${at}].`);
      return null;
    });
  } catch {
    return null;
  }
}

type Nested = (field: number, reader: protobuf.Reader, end: number, at: number) => string | null;

const nested =
  (only: number, fields: Record<number, Limit>, prefix: string): Nested =>
  (field, reader, end) =>
    field === only ? scan(reader, end, fields, prefix) : null;

/** Counts the fields of the message from the reader's place to `end` (a packed field's varints
 *  as its entries), looking into length-delimited ones with `into` (given the entry's index); the
 *  first over its limit is the answer. */
function scan(
  reader: protobuf.Reader,
  end: number,
  limits: Record<number, Limit>,
  prefix: string,
  into?: Nested,
): string | null {
  const counts = new Map<number, number>();
  while (reader.pos < end) {
    const tag = reader.uint32();
    const [field, wire] = [tag >>> 3, tag & 7];
    const at = counts.get(field) ?? 0;
    const limit = limits[field];
    let count = 1;
    if (wire === LENGTH_DELIMITED) {
      const length = reader.uint32();
      const stop = reader.pos + length;
      if (stop > end) return null; // not a message: protobufjs says why
      const why = into?.(field, reader, stop, at);
      if (why) return why;
      if (limit?.[2]) count = length > limit[1] * VARINT_BYTES ? Infinity : varints(reader, stop);
      reader.pos = stop;
    } else reader.skipType(wire);
    counts.set(field, at + count);
    if (limit && at + count > limit[1]) return `${prefix}${limit[0]}: more than ${limit[1]} entries`;
  }
  return null;
}

/** The varints from the reader's place to `end`: a varint's last byte is under 0x80. */
function varints(reader: protobuf.Reader, end: number): number {
  let n = 0;
  for (let i = reader.pos; i < end; i++) if (reader.buf[i]! < 0x80) n++;
  return n;
}
