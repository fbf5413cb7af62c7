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

/** Sets the count field of directory `page`'s `tag` (its values left where they are); of its
 *  SubIFD `subifd` where one is given. */
export const setCount = (path: string, tag: string, count: number, page = 0, subifd = -1) =>
  tifffile(
    'import struct\nwith tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n t = f.tiff\n p = f.pages[int(sys.argv[3])]\n if int(sys.argv[5]) >= 0: p = p.pages[int(sys.argv[5])]\n f.filehandle.seek(p.tags[sys.argv[2]].offset + 4)\n f.filehandle.write(struct.pack(t.offsetformat, int(sys.argv[4])))',
    path,
    tag,
    String(page),
    String(count),
    String(subifd),
  );

/** Appends a tiled label image to the chain, as some scanners write one: 160x48 RGB pixels in
 *  16x16 uncompressed tiles (10x3), described "label". */
export const appendLabel = (path: string) =>
  tifffile(
    'import numpy\nlabel = numpy.full((48, 160, 3), 90, numpy.uint8)\ntifffile.imwrite(sys.argv[1], label, append=True, tile=(16, 16), photometric="rgb", description="label", metadata=None)',
    path,
  );

/** Rewrites directory 0's SubIFDs as `copies` copies of its first entry (tifffile appends the
 *  longer value at the file's end). */
export const repeatSubIfds = (path: string, copies: number) =>
  tifffile(
    'with tifffile.TiffFile(sys.argv[1], mode="r+b") as f:\n tag = f.pages[0].tags["SubIFDs"]\n tag.overwrite([tag.value[0]] * int(sys.argv[2]))',
    path,
    String(copies),
  );

/** An OME-TIFF written by tifffile whose first image lists `levels` reduced levels in SubIFDs
 *  (64x64 pixels, 16x16 tiles, uncompressed), each its own directory; a BigTIFF where `big`; a
 *  plain TIFF (no OME-XML) with the same SubIFDs where `ome` is false. */
export const omeSubIfds = (path: string, levels: number, big = false, ome = true) =>
  tifffile(
    'import numpy\nn = int(sys.argv[2])\nome = sys.argv[4] == "ome"\nimage = numpy.full((64, 64, 3), 200, numpy.uint8)\nwith tifffile.TiffWriter(sys.argv[1], ome=ome, bigtiff=sys.argv[3] == "big") as tif:\n tif.write(image, tile=(16, 16), photometric="rgb", subifds=n, metadata={"axes": "YXS", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5} if ome else None)\n for k in range(n): tif.write(image[:32, :32], tile=(16, 16), photometric="rgb", subfiletype=1, metadata=None)',
    path,
    String(levels),
    big ? 'big' : 'classic',
    ome ? 'ome' : 'plain',
  );

/** A BigTIFF written by tifffile: 64x64 RGB pixels in 16x16 uncompressed tiles, 0.5 µm/px
 *  (TileOffsets and TileByteCounts LONG8, as BigTIFF writes them). */
export const bigTiff = (path: string) =>
  tifffile(
    'import numpy\nimage = numpy.full((64, 64, 3), 200, numpy.uint8)\ntifffile.imwrite(sys.argv[1], image, bigtiff=True, tile=(16, 16), photometric="rgb", resolution=(20000, 20000), resolutionunit="CENTIMETER")',
    path,
  );
