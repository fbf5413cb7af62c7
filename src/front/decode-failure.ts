// A worker's DecodeFailure as the contract's 422 item: the front alone words what the client sees,
// at the place in the request that held the image.
import type { DecodeFailure } from '../ipc/protocol.js';
import type { FieldError } from '../lib/errors.js';

export function decodeFailureItem(loc: string[], failure: DecodeFailure): FieldError {
  return { loc, msg: `Value error, ${wording(loc, failure)}`, type: 'value_error' };
}

function wording(loc: string[], failure: DecodeFailure): string {
  switch (failure.kind) {
    case 'rgb-length':
      return `a raw RGB body has width x height x 3 = ${failure.expected} bytes, got ${failure.got}`;
    case 'png-undecodable':
      return `${loc.length > 1 ? String(loc.at(-1)) : 'the body'} is not a decodable PNG: ${failure.reason}`;
    case 'png-size':
      return `PNG is ${failure.width}x${failure.height} pixels, expected width x height = ${failure.expectedWidth}x${failure.expectedHeight}`;
  }
}
