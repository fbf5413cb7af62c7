// IEEE 754 half precision <-> float32. onnxruntime-node carries float16 tensors as Uint16Array
// bit patterns (Node 20 has no Float16Array). A 64 Ki-entry table decodes; the encoder rounds to
// nearest even as ONNX Runtime's Cast does (F. Giesen's float_to_half_fast3_rtne).

const DECODE = (() => {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    if (exponent === 0) table[h] = sign * mantissa * 2 ** -24;
    else if (exponent === 31) table[h] = mantissa ? NaN : sign * Infinity;
    else table[h] = sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
  }
  return table;
})();

export function float16ToFloat32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = DECODE[bits[i]];
  return out;
}

const F32_INFINITY = 255 << 23;
const F16_OVERFLOW = (127 + 16) << 23;
const DENORMAL_MAGIC = (127 - 15 + 23 - 10 + 1) << 23;
const scratch = new Float32Array(1);
const scratchBits = new Uint32Array(scratch.buffer);
const magicFloat = new Float32Array(new Uint32Array([DENORMAL_MAGIC]).buffer)[0];

/** `out`: where the bit patterns go (a new array by default). */
export function float32ToFloat16(values: Float32Array, out = new Uint16Array(values.length)): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) {
    let u = bits[i];
    const sign = (u >>> 16) & 0x8000;
    u &= 0x7fffffff;
    let h: number;
    if (u >= F16_OVERFLOW) h = u > F32_INFINITY ? 0x7e00 : 0x7c00;
    else if (u < 113 << 23) {
      // Subnormal half: let the float adder do the rounding.
      scratchBits[0] = u;
      scratch[0] += magicFloat;
      h = scratchBits[0] - DENORMAL_MAGIC;
    } else {
      const odd = (u >>> 13) & 1;
      h = (u + ((15 - 127) << 23) + 0xfff + odd) >>> 13;
    }
    out[i] = h | sign;
  }
  return out;
}
