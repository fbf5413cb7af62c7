// The sha256 of a model package: every file of the folder (manifest, graph, external weights),
// so other weights under the same model.onnx give another hash. Reproducible from a shell:
//   (cd models/<name> && find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum)
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Regular files under dir, relative paths, in byte order (as LC_ALL=C sort). */
export function packageFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/** sha256 of the lines "<sha256 of file>  <path>\n", as sha256sum prints them. */
export function packageDigest(dir: string): string {
  const listing = packageFiles(dir)
    .map(
      (file) =>
        `${createHash('sha256')
          .update(readFileSync(join(dir, file)))
          .digest('hex')}  ${file}\n`,
    )
    .join('');
  return createHash('sha256').update(listing).digest('hex');
}
