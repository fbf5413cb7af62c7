// The error of a package the service cannot serve, apart from model-package.ts so that the digest
// (which model-package.ts imports) can throw it too.
import { CodedError, type CodesOf } from '../lib/errors.js';

/** A package the service cannot serve; its code says which part is wrong (src/lib/errors.ts). */
export class PackageError extends CodedError<CodesOf<'PACKAGE'>> {
  override name = 'PackageError';
}
