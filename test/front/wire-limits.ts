// A ModelInferRequest's entries counted on the wire before protobufjs decodes it: requests built
// by proto-loader's serializer from the published .proto, inside the limits and past each.
import fc from 'fast-check';
import t from 'tap';
import * as protoLoader from '@grpc/proto-loader';
import { LOADER_OPTIONS, PROTO_FILE } from '../../src/front/v2/grpc-server.js';
import { overLimits, WIRE_LIMITS } from '../../src/front/v2/wire-limits.js';

const ModelInfer = (protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS)['inference.GRPCInferenceService'] as any)
  .ModelInfer as { requestSerialize(value: object): Buffer; requestDeserialize(bytes: Buffer): any };
const request = (value: object) => ModelInfer.requestSerialize({ model_name: 'tile-embed', ...value });
const image = (shape: number[], extra: object = {}) => ({ name: 'image', datatype: 'UINT8', shape, ...extra });
const param = { int64_param: 1 };

t.test('requests within the limits pass, whatever their data', async (t) => {
  const raw = request({ inputs: [image([32, 224, 224, 3])], raw_input_contents: [Buffer.alloc(32 * 224 * 224 * 3)] });
  t.equal(overLimits(raw), null, 'a batch of 32 raw tiles');
  const typed = request({
    inputs: [image([1, 224, 224, 3], { contents: { uint_contents: new Array(150_528).fill(200) } })],
  });
  t.equal(overLimits(typed), null, 'a tile in uint_contents (packed, skipped by its length)');
  // Six dimensions of three-byte varints: 18 bytes of packed shape, six entries.
  t.equal(overLimits(request({ inputs: [image([100_000, 100_000, 100_000, 100_000, 100_000, 100_000])] })), null);
  const limits = request({
    parameters: Object.fromEntries(Array.from({ length: WIRE_LIMITS.parameters }, (_, i) => [`p${i}`, param])),
    inputs: Array.from({ length: WIRE_LIMITS.tensors }, () => image(new Array(WIRE_LIMITS.dims).fill(2))),
    outputs: Array.from({ length: WIRE_LIMITS.tensors }, () => ({ name: 'embedding' })),
  });
  t.equal(overLimits(limits), null, 'every limit reached, none passed');
  t.equal(overLimits(Buffer.from([0xff, 0xff, 0xff])), null, 'not a message: left to protobufjs');
});

t.test('each limit passed is named', async (t) => {
  const over = (value: object) => overLimits(request(value));
  t.equal(over({ inputs: new Array(WIRE_LIMITS.tensors + 1).fill(image([1])) }), 'inputs: more than 64 entries');
  t.equal(over({ outputs: new Array(WIRE_LIMITS.tensors + 1).fill({ name: 'x' }) }), 'outputs: more than 64 entries');
  t.equal(
    over({ raw_input_contents: new Array(WIRE_LIMITS.tensors + 1).fill(Buffer.alloc(1)) }),
    'raw_input_contents: more than 64 entries',
  );
  const many = Object.fromEntries(Array.from({ length: WIRE_LIMITS.parameters + 1 }, (_, i) => [`p${i}`, param]));
  t.equal(over({ parameters: many }), 'parameters: more than 64 entries');
  t.equal(
    over({ inputs: [image([1]), image([1], { parameters: many })] }),
    'inputs[1].parameters: more than 64 entries',
  );
  t.equal(over({ outputs: [{ name: 'x', parameters: many }] }), 'outputs[0].parameters: more than 64 entries');
  t.equal(over({ inputs: [image(new Array(WIRE_LIMITS.dims + 1).fill(1))] }), 'inputs[0].shape: more than 16 entries');
  const files = new Array(WIRE_LIMITS.bytesElements + 1).fill(Buffer.alloc(0));
  t.equal(
    over({ inputs: [image([files.length], { datatype: 'BYTES', contents: { bytes_contents: files } })] }),
    'inputs[0].contents.bytes_contents: more than 4096 entries',
  );
});

t.test('8.4 million empty inputs in 16 MiB are refused at the 65th, without reading on', async (t) => {
  // The attack: field 5 (inputs), length 0, again and again.
  const message = Buffer.alloc(16 << 20);
  for (let i = 0; i < message.length; i += 2) message[i] = 0x2a;
  const started = performance.now();
  t.equal(overLimits(message), 'inputs: more than 64 entries');
  const ms = performance.now() - started;
  t.ok(ms < 50, `in ${ms.toFixed(2)} ms`);
});

t.test('fast-check: a request passes exactly when protobufjs decodes it within every limit', async () => {
  const small = (max: number) => fc.integer({ min: 0, max: max + 2 });
  fc.assert(
    fc.property(
      small(WIRE_LIMITS.tensors),
      small(WIRE_LIMITS.dims),
      small(WIRE_LIMITS.parameters),
      fc.integer({ min: 0, max: 2 ** 40 }),
      (inputs, dims, parameters, dim) => {
        const bytes = request({
          parameters: Object.fromEntries(Array.from({ length: parameters }, (_, i) => [`p${i}`, param])),
          inputs: Array.from({ length: inputs }, () => image(new Array(dims).fill(dim))),
        });
        const decoded = ModelInfer.requestDeserialize(bytes);
        const within =
          decoded.inputs.length <= WIRE_LIMITS.tensors &&
          Object.keys(decoded.parameters).length <= WIRE_LIMITS.parameters &&
          decoded.inputs.every((i: { shape: number[] }) => i.shape.length <= WIRE_LIMITS.dims);
        return (overLimits(bytes) === null) === within;
      },
    ),
    { numRuns: 200 },
  );
});
