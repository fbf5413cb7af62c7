// gRPC's InferTensorContents read into typed arrays: what protobufjs reads from the published
// .proto, packed or not, and malformed runs refused.
import fc from 'fast-check';
import t from 'tap';
import protobuf from 'protobufjs';
import { isDeepStrictEqual } from 'node:util';
import { LOADER_OPTIONS, PROTO_FILE } from '../../src/front/v2/grpc-server.js';
import { decodeTensorContents, inferRequestDecoder } from '../../src/front/v2/tensor-contents.js';

const root = new protobuf.Root().loadSync(PROTO_FILE, { keepCase: true });
const Contents = root.lookupType('inference.InferTensorContents');
/** The same fields, each element its own field entry (proto3 writes them packed). */
const Unpacked = protobuf.Type.fromJSON('Unpacked', {
  fields: Object.fromEntries(
    Contents.fieldsArray.map((f) => [
      f.name,
      { rule: 'repeated', type: f.type, id: f.id, ...(f.type !== 'bytes' && { options: { packed: false } }) },
    ]),
  ),
});
new protobuf.Root().add(Unpacked);

const NUMERIC = [
  'bool_contents',
  'int_contents',
  'int64_contents',
  'uint_contents',
  'uint64_contents',
  'fp32_contents',
  'fp64_contents',
] as const;

const contents = fc.record({
  bool_contents: fc.array(fc.boolean(), { maxLength: 8 }),
  int_contents: fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 8 }),
  int64_contents: fc.array(fc.maxSafeInteger(), { maxLength: 8 }),
  uint_contents: fc.array(fc.oneof(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 2 ** 32 - 1 })), {
    maxLength: 8,
  }),
  uint64_contents: fc.array(fc.maxSafeNat(), { maxLength: 8 }),
  fp32_contents: fc.array(fc.float({ noNaN: true }), { maxLength: 8 }),
  fp64_contents: fc.array(fc.double({ noNaN: true }), { maxLength: 8 }),
  bytes_contents: fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 4 }),
});
type Values = typeof contents extends fc.Arbitrary<infer V> ? V : never;

/** What protobufjs reads, as proto-loader's options give it (bool as 0 and 1). */
function reference(bytes: Uint8Array): Record<string, unknown[]> {
  const read = Contents.toObject(Contents.decode(bytes), LOADER_OPTIONS) as Record<string, unknown[]>;
  return { ...read, bool_contents: read.bool_contents!.map(Number) };
}

function asRead(bytes: Uint8Array): Record<string, unknown[]> {
  const read = decodeTensorContents(protobuf.Reader.create(bytes));
  return {
    ...Object.fromEntries(NUMERIC.map((name) => [name, Array.from(read[name])])),
    bytes_contents: read.bytes_contents.map((b) => new Uint8Array(b)),
  };
}

t.test('contents read as protobufjs reads them, packed, unpacked, or both in one message', async (t) => {
  fc.assert(
    fc.property(contents, contents, (packed: Values, unpacked: Values) => {
      const bytes = Buffer.concat([
        Contents.encode(Contents.fromObject(packed)).finish(),
        Unpacked.encode(Unpacked.fromObject(unpacked)).finish(),
      ]);
      const expected = reference(bytes);
      expected.bytes_contents = expected.bytes_contents!.map((b) => new Uint8Array(b as Uint8Array));
      const uint = decodeTensorContents(protobuf.Reader.create(bytes)).uint_contents;
      const max = Math.max(0, ...packed.uint_contents, ...unpacked.uint_contents);
      return isDeepStrictEqual(asRead(bytes), expected) && uint instanceof (max > 255 ? Uint32Array : Uint8Array);
    }),
    { numRuns: 300 },
  );
  // The twin writes an entry per element: [1, 2] in uint_contents as two (field 4, varint) entries.
  t.same([...Unpacked.encode({ uint_contents: [1, 2] }).finish()], [0x20, 1, 0x20, 2]);
  t.same([...Contents.encode({ uint_contents: [1, 2] }).finish()], [0x22, 2, 1, 2], 'proto3 packs them');
});

t.test('unpacked elements of several fields, interleaved, read as protobufjs reads them', async () => {
  // Each element its own entry, the fields taking turns: no two entries of a field side by side.
  const entries = contents.chain((values: Values) =>
    fc.shuffledSubarray(
      NUMERIC.flatMap((name) => (values[name] as unknown[]).map((v) => ({ [name]: [v] }))),
      { minLength: 0 },
    ),
  );
  fc.assert(
    fc.property(entries, (list) => {
      const bytes = Buffer.concat(list.map((entry) => Unpacked.encode(Unpacked.fromObject(entry)).finish()));
      const expected = reference(bytes);
      expected.bytes_contents = [];
      return isDeepStrictEqual(asRead(bytes), expected);
    }),
    { numRuns: 300 },
  );
});

t.test('varints written longer than they need (up to 10 bytes) read as their shortest form does', async () => {
  /** The value's varint, padded with continuation bytes to `extra` more bytes (at most 10 in all). */
  const padded = (value: number, extra: number) => {
    const bytes = [...protobuf.Writer.create().uint32(value).finish()];
    const pad = Math.min(extra, 10 - bytes.length);
    if (pad <= 0) return bytes;
    bytes[bytes.length - 1] |= 0x80;
    return [...bytes, ...Array(pad - 1).fill(0x80), 0];
  };
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.constantFrom(2, 4), fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.nat(9)), { maxLength: 8 }),
      (elements) => {
        // Each element unpacked: its tag (field 2 int_contents or 4 uint_contents, varint), then it.
        const message = (extra: (n: number) => number) =>
          Buffer.from(elements.flatMap(([field, value, n]) => [field << 3, ...padded(value, extra(n))]));
        return isDeepStrictEqual(asRead(message((n) => n)), asRead(message(() => 0)));
      },
    ),
    { numRuns: 300 },
  );
});

t.test('a UINT8 tile in uint_contents is read as its bytes, through the request decoder', async (t) => {
  const pixels = Uint8Array.from({ length: 512 * 512 * 3 }, (_, i) => (i * 7) % 256);
  const Request = root.lookupType('inference.ModelInferRequest');
  const message = Request.encode(
    Request.fromObject({
      model_name: 'tissue-seg',
      inputs: [
        { name: 'image', datatype: 'UINT8', shape: [1, 512, 512, 3], contents: { uint_contents: Array.from(pixels) } },
      ],
    }),
  ).finish();
  const decoded = inferRequestDecoder(PROTO_FILE, LOADER_OPTIONS)(message) as {
    model_name: string;
    inputs: { shape: number[]; contents: { uint_contents: Uint8Array; fp32_contents: Float32Array } }[];
  };
  t.equal(decoded.model_name, 'tissue-seg');
  t.same(decoded.inputs[0]!.shape, [1, 512, 512, 3]);
  const uint = decoded.inputs[0]!.contents.uint_contents;
  t.ok(uint instanceof Uint8Array && uint.byteLength === pixels.length, `${uint.byteLength} bytes held`);
  t.ok(Buffer.from(uint).equals(Buffer.from(pixels)), 'its values');
  t.equal(decoded.inputs[0]!.contents.fp32_contents.length, 0, 'the other fields empty');
});

t.test('malformed contents are refused, naming the field', async (t) => {
  const read = (bytes: number[]) => decodeTensorContents(protobuf.Reader.create(Uint8Array.from(bytes)));
  t.throws(() => read([0x32, 5, 0, 0, 0, 0, 0]), /fp32_contents: a packed run of 5 bytes/);
  t.throws(() => read([0x3a, 4, 0, 0, 0, 0]), /fp64_contents: a packed run of 4 bytes/);
  t.throws(() => read([0x22, 2, 0x01, 0x80]), /uint_contents: a varint cut off/);
  t.throws(() => read([0x22, 9, 0x01]), /uint_contents: a packed run past the end/);
  t.throws(() => read([0x30, 0x01]), /fp32_contents: wire type 0/, 'a float as a varint is not');
  t.throws(() => read([0x40, 0x01]), /bytes_contents: wire type 0/);
  t.same(Array.from(read([0x35, 0, 0, 0x80, 0x3f]).fp32_contents), [1], 'one unpacked float');
  t.same(read([0x48, 0x01]).uint_contents.length, 0, 'an unknown field is skipped');
  // A length past the message: refused before its runs are counted (a packed run's length of
  // 4 GB in a 12-byte message had been counted byte by byte, seconds of the main thread).
  const started = performance.now();
  const cut = Uint8Array.from([0x22, 0xff, 0xff, 0xff, 0xff, 0x0f, 1]);
  t.throws(() => decodeTensorContents(protobuf.Reader.create(cut), 2 ** 32), /longer than the message/);
  t.ok(performance.now() - started < 100, 'at once');
});
