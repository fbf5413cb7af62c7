// Checks of a tile request against the model that will run it, done in the front because they
// need no pixels: tile size, resolution, bulk_rna, base64, the PNG header (so a PNG declaring
// huge dimensions is refused before anything inflates it) and a raw body's length. The rest of
// the PNG rules run in the worker, beside decoding. The decoded PNG bytes go to the worker as a
// Buffer: 25% fewer bytes over IPC than the base64 text.
import type { FieldError, TileJobImage } from '../ipc/protocol.js';
import type { Manifest } from '../model-package/manifest.js';
import { PngError, readPngHeader, type PngHeader } from '../tile/png-rules.js';
import type { ValueLimit } from './plugins/json-body.js';
import { fieldsLocation, imageLoc, type TileBody } from './tile-image.js';

export interface CheckedTile {
  errors: FieldError[];
  /** The image for the worker, when it passed the checks here. */
  image: TileJobImage | null;
}

/** Values a request's body may hold besides bulk_rna's: a tile request's fields, and room for
 *  fields the contract does not name, which are ignored, as FastAPI ignores them. */
export const EXTRA_VALUES = 1024;

/** The values a request's body may hold: a tile request to `model` (its manifest once loaded)
 *  its fields and bulk_rna counts, any other request its fields. */
export function valueLimit(model?: { name: string; manifest?: Manifest }): ValueLimit {
  if (!model) return { values: EXTRA_VALUES, expected: 'this request takes a few fields' };
  const genes = model.manifest?.genes?.input.length ?? 0;
  return {
    values: genes + EXTRA_VALUES,
    expected: genes
      ? `a ${model.name} tile request holds its fields and its ${genes} bulk_rna counts (GET /api/metadata/${model.name})`
      : `a ${model.name} tile request holds its fields (it takes no bulk_rna)`,
  };
}

export function checkTile(body: TileBody, manifest: Manifest, usesBulk: boolean, maxPixels: number): CheckedTile {
  const errors: FieldError[] = [];
  const { tile, name } = manifest;
  const fields = fieldsLocation(body);
  const fail = (field: string, msg: string, ctx?: Record<string, unknown>) =>
    errors.push({ loc: [fields, field], msg: `Value error, ${msg}`, type: 'value_error', ...(ctx && { ctx }) });

  if (body.width !== tile.width || body.height !== tile.height) {
    const field = body.width !== tile.width ? 'width' : 'height';
    fail(field, `${name} takes ${tile.width}x${tile.height} tiles, got width x height = ${body.width}x${body.height}`, {
      expected: `${tile.width}x${tile.height}`,
    });
  }
  if (body.resolution !== undefined && body.resolution !== null) {
    const low = tile.mpp * (1 - tile.mpp_tolerance);
    const high = tile.mpp * (1 + tile.mpp_tolerance);
    if (!(body.resolution >= low && body.resolution <= high)) {
      fail(
        'resolution',
        `${name} takes tiles at ${tile.mpp} MPP (${low.toFixed(3)} to ${high.toFixed(3)}), got ${body.resolution}`,
        { expected: tile.mpp, tolerance: tile.mpp_tolerance },
      );
    }
  }
  if (usesBulk && manifest.genes && body.bulk_rna) {
    const genes = manifest.genes.input.length;
    if (body.bulk_rna.length !== genes) {
      fail(
        'bulk_rna',
        `bulk_rna should have ${genes} values, one per input gene of ${name} (GET /api/metadata/${name}), got ${body.bulk_rna.length}`,
        { expected: genes },
      );
    } else {
      // The schema already refused non-numbers and non-finite values (ajv's number type is finite).
      const bad = body.bulk_rna.findIndex((v) => v < 0);
      // Untransformed counts reach the model as float32: past its range they would be Infinity.
      const over =
        manifest.genes.bulk_transform === 'none'
          ? body.bulk_rna.findIndex((v) => !Number.isFinite(Math.fround(v)))
          : -1;
      if (bad >= 0)
        errors.push({
          loc: [fields, 'bulk_rna', bad],
          msg: 'Value error, bulk RNA counts should be >= 0',
          type: 'value_error',
        });
      else if (over >= 0)
        errors.push({
          loc: [fields, 'bulk_rna', over],
          msg: `Value error, ${name} takes its bulk RNA counts untransformed, as float32: they should be within its range (3.4e38)`,
          type: 'value_error',
        });
    }
  }

  const image = body.image_data;
  const loc = imageLoc(image);
  const imageFail = (msg: string) => errors.push({ loc, msg: `Value error, ${msg}`, type: 'value_error' });
  if (image.format === 'not-base64') {
    errors.push({ loc, msg: `Base64 decoding error: ${image.reason}`, type: 'base64_decode' });
    return { errors, image: null };
  }
  if (image.format === 'rgb') {
    const expected = body.width * body.height * 3;
    if (image.bytes.length !== expected)
      imageFail(
        `a raw RGB body has width x height x 3 = ${body.width}x${body.height}x3 = ${expected} bytes (uint8 RGB, row-major), got ${image.bytes.length}`,
      );
    return { errors, image: { format: 'rgb', bytes: image.bytes, loc } };
  }
  let header: PngHeader;
  try {
    header = readPngHeader(image.bytes);
  } catch (err) {
    if (!(err instanceof PngError)) throw err;
    const subject = image.from === 'body' ? 'the body' : 'image_data';
    const what =
      err.rule !== 'signature'
        ? `${subject} is not a valid PNG`
        : image.from === 'body'
          ? 'the body should be a PNG'
          : 'image_data should be a base64-encoded PNG';
    imageFail(`${what}: ${err.message}`);
    return { errors, image: null };
  }
  if (header.width * header.height > maxPixels) {
    imageFail(
      `PNG declares ${header.width}x${header.height} pixels, more than the limit of ${maxPixels}; refused before decoding`,
    );
  } else if (header.width !== body.width || header.height !== body.height) {
    imageFail(`PNG is ${header.width}x${header.height} pixels, expected width x height = ${body.width}x${body.height}`);
  }
  return { errors, image: { format: 'png', bytes: image.bytes, loc } };
}
