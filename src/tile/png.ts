// PNG tiles to pixels, off the JS thread. Every PNG first passes the rules of png-rules.ts;
// 8-bit RGB and RGBA (what tile pipelines write; interlaced or not) are then decoded by
// @napi-rs/image on the libuv pool while the image data's bound is checked beside it, also on
// the pool; the rare other layouts (greyscale, palette, 16-bit) go through pngjs once that bound
// has been checked. The comparison that chose the decoder is in the README ("Throughput").
import { Transformer } from '@napi-rs/image';
import { PNG } from 'pngjs';
import { checkImageData, readPngLayout, type PngHeader } from './png-rules.js';

export interface Pixels {
  width: number;
  height: number;
  /** 3 (RGB) or 4 (RGBA), interleaved, row-major, no padding. */
  channels: 3 | 4;
  data: Uint8Array;
}

/** Decodes a PNG to 8-bit pixels; rejects with a PngError naming the broken rule, or with the
 *  decoder's reason. */
export async function decodePng(bytes: Buffer): Promise<Pixels> {
  const layout = readPngLayout(bytes);
  const { header } = layout;
  if (header.bitDepth === 8 && (header.colorType === 2 || header.colorType === 6)) {
    // The decoder stops at the declared size itself, so running it beside the bound check costs
    // a bomb nothing; when both fail, the rule's error is the one reported.
    const [checked, decoded] = await Promise.allSettled([checkImageData(layout), new Transformer(layout.pixelChunks).rawPixels()]);
    if (checked.status === 'rejected') throw checked.reason;
    if (decoded.status === 'rejected') throw decoded.reason;
    const data = decoded.value;
    return { width: header.width, height: header.height, channels: channelsOf(data, header), data };
  }
  await checkImageData(layout);
  const png = PNG.sync.read(layout.pixelChunks);
  return { width: png.width, height: png.height, channels: 4, data: png.data };
}

/** RGB, or RGBA (also for RGB with a tRNS chunk, which the decoder expands to alpha). */
function channelsOf(data: Uint8Array, header: PngHeader): 3 | 4 {
  const channels = data.length / (header.width * header.height);
  if (channels !== 3 && channels !== 4) throw new Error(`decoder returned ${data.length} bytes for ${header.width}x${header.height} pixels`);
  return channels;
}
