// The first bytes of a file without reading the rest: what a header check needs (a PNG's IHDR,
// an ELF header, a library's version strings).
import { closeSync, openSync, readSync } from 'node:fs';

/** Up to `bytes` bytes from the start of `file`, or from offset `at` (fewer when it is shorter). */
export function readHead(file: string, bytes: number, at = 0): Buffer {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(bytes);
    return head.subarray(0, readSync(fd, head, 0, bytes, at));
  } finally {
    closeSync(fd);
  }
}
