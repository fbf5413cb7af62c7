"""An OME-TIFF written by tifffile from a pyramidal JPEG TIFF, with the very same JPEG tiles:
level 0 in the first directory, the reduced levels in its SubIFDs, the MPP as the OME-XML's
PhysicalSizeX/Y in a given unit. Tests and the benchmark run it (Debian: python3-tifffile).

    python3 ome-tiff.py SOURCE.tif OUT.ome.tif MPP [UNIT]
"""
import sys

import numpy
import tifffile

MICRONS = {'µm': 1.0, 'nm': 1e-3, 'mm': 1e3, 'cm': 1e4}


def raw_tiles(fh, page):
    for offset, count in zip(page.dataoffsets, page.databytecounts):
        fh.seek(offset)
        yield fh.read(count)


def refuse(*args, **kwargs):
    raise RuntimeError('the tiles are copied as they are, never encoded here')


def main(source, out, mpp, unit='µm'):
    # tifffile looks its JPEG encoder up (in imagecodecs, not in Debian) even for tiles given
    # encoded, which it writes as they are: give it one that is never called.
    tifffile.TIFF.COMPRESSORS._codecs[7] = refuse
    size = float(mpp) / MICRONS[unit]
    with tifffile.TiffFile(source) as src, tifffile.TiffWriter(out, ome=True) as tif:
        pages = [p for p in src.pages if p.is_tiled]
        for k, page in enumerate(pages):
            ycbcr = page.photometric == tifffile.PHOTOMETRIC.YCBCR
            options = dict(
                shape=(page.imagelength, page.imagewidth, 3),
                dtype=numpy.uint8,
                tile=(page.tilelength, page.tilewidth),
                compression='jpeg',
                photometric='ycbcr' if ycbcr else 'rgb',
                subsampling=page.subsampling if ycbcr else None,
                jpegtables=page.jpegtables,
            )
            if k == 0:
                options.update(subifds=len(pages) - 1, metadata={'axes': 'YXS', 'PhysicalSizeX': size, 'PhysicalSizeXUnit': unit, 'PhysicalSizeY': size, 'PhysicalSizeYUnit': unit})
            else:
                options.update(subfiletype=1, metadata=None)
            tif.write(raw_tiles(src.filehandle, page), **options)


if __name__ == '__main__':
    main(*sys.argv[1:])
