import t from 'tap';
import { numbersJson, maskJson, tileResponseJson } from '../../src/front/response-writer.js';

const request = {
  image_data: '',
  slide_name: 'a "quoted" \\ slide',
  x: 1,
  y: -2,
  width: 3,
  height: 2,
  patch_idx: 9,
  resolution: 0.5,
};

t.test('mask writer is valid JSON equal to JSON.stringify', async (t) => {
  const mask = Uint8Array.from({ length: 512 * 512 }, (_, i) => ((i * 7919) % 3 === 0 ? 1 : 0));
  t.equal(maskJson(mask).toString(), JSON.stringify(Array.from(mask)));
  t.equal(maskJson(new Uint8Array(0)).toString(), '[]');
});

t.test('number writer matches JSON.stringify, non-finite included', async (t) => {
  const values = Float32Array.from([0.1, -2.5e-8, 3e38, 0, -0]);
  t.same(JSON.parse(numbersJson(values)), JSON.parse(JSON.stringify(Array.from(values))));
  t.equal(numbersJson(Float32Array.from([1, NaN, Infinity])), '[1,null,null]');
  t.equal(numbersJson(Float64Array.from([168, 127, 2 ** 40])), '[168,127,1099511627776]');
});

t.test('tile response equals the slow path', async (t) => {
  const output = Float32Array.from([0.25, 1.5, -3]);
  const embedding = Float32Array.from([0.5, 0.75]);
  const fast = JSON.parse(
    tileResponseJson(request, {
      output: { role: 'prediction', values: output },
      embedding,
      tissueRatio: 0.3,
    }).toString(),
  );
  const { image_data: _i, ...echo } = request;
  t.same(fast, { output: Array.from(output), ...echo, tissue_ratio: 0.3, embedding: Array.from(embedding) });
  const mask = JSON.parse(
    tileResponseJson(
      { ...request, resolution: undefined },
      { output: { role: 'mask', mask: Uint8Array.from([1, 0, 1, 1, 0, 0]) }, embedding: null, tissueRatio: null },
    ).toString(),
  );
  t.same(mask, { output: [1, 0, 1, 1, 0, 0], ...echo, resolution: null, tissue_ratio: null, embedding: null });
  // By role, not by array type: a uint8 prediction is integers, not a mask.
  const uint8 = JSON.parse(
    tileResponseJson(request, {
      output: { role: 'prediction', values: Float64Array.from(Uint8Array.from([168, 127])) },
      embedding: null,
      tissueRatio: null,
    }).toString(),
  );
  t.same(uint8.output, [168, 127]);
});
