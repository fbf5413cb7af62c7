// Edits to a TIFF's tags in place, by tifffile (Debian's python3-tifffile), as a real file would
// come with them: tiles never written (sparse SVS) and a description that is no longer Aperio's
// (de-identified slides). tifffile, not our own writer, so that the reader is tested on a file
// another program made.
import { execFileSync } from 'node:child_process';

const tifffile = (script: string, ...args: string[]) =>
  execFileSync('/usr/bin/python3', ['-c', `import sys, tifffile\n${script}`, ...args]);

/** Zeroes the TileByteCounts of `tiles` (indices in the directory's tile order) of directory
 *  `page`: tiles never written. */
export const unwriteTiles = (path: string, tiles: number[], page = 0) =>
  tifffile(
    'with tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n tag = f.pages[int(sys.argv[2])].tags["TileByteCounts"]\n counts = list(tag.value)\n for i in sys.argv[3:]: counts[int(i)] = 0\n tag.overwrite(counts)',
    path,
    String(page),
    ...tiles.map(String),
  );

/** Overwrites the bytes of `tiles` of directory `page` with zeros: tiles written, but broken. */
export const breakTiles = (path: string, tiles: number[], page = 0) =>
  tifffile(
    'with tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n p = f.pages[int(sys.argv[2])]\n for i in sys.argv[3:]:\n  f.filehandle.seek(p.dataoffsets[int(i)])\n  f.filehandle.write(bytes(p.databytecounts[int(i)]))',
    path,
    String(page),
    ...tiles.map(String),
  );

/** Overwrites directory 0's ImageDescription. */
export const describe = (path: string, text: string) =>
  tifffile(
    'with tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n f.pages[0].tags["ImageDescription"].overwrite(sys.argv[2])',
    path,
    text,
  );

/** Points the last directory's next-directory offset back at the first: a chain that loops. */
export const loopDirectories = (path: string) =>
  tifffile(
    'import struct\nwith tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n t, fh = f.tiff, f.filehandle\n first, last = f.pages[0].offset, f.pages[-1].offset\n fh.seek(last)\n n = struct.unpack(t.tagnoformat, fh.read(t.tagnosize))[0]\n fh.seek(last + t.tagnosize + n * t.tagsize)\n fh.write(struct.pack(t.offsetformat, first))',
    path,
  );
