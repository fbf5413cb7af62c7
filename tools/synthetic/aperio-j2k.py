"""An Aperio SVS with JPEG 2000 tiles, as Aperio's scanners write them: a codestream per tile,
compression 33003 (Y, Cb, Cr, no colour transform; the chroma at half width as Aperio writes it, or
at full width: ycbcr444) or 33005 (R, G, B),
from a tiled pyramidal TIFF with uncompressed RGB tiles (libvips: `vips tiffsave --tile
--pyramid`). The codestreams are OpenJPEG's (`opj_compress`, Debian: libopenjp2-tools),
lossless; tifffile (python3-tifffile) writes them into the file as they are. Tests run it.

    python3 aperio-j2k.py SOURCE.tif OUT.svs ycbcr|ycbcr444|rgb MPP
"""
import os
import subprocess
import sys
import tempfile

import numpy
import tifffile

CODES = {'ycbcr': 33003, 'ycbcr444': 33003, 'rgb': 33005}


def refuse(*args, **kwargs):
    raise RuntimeError('the codestreams are written as opj_compress made them, never encoded here')


def ycbcr_planes(rgb, half_width):
    """JFIF's full-range Y, Cb, Cr; Cb and Cr averaged over pairs of columns when half_width."""
    r, g, b = (rgb[..., i].astype(numpy.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
    cr = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
    half = (lambda c: (c[:, 0::2] + c[:, 1::2]) / 2) if half_width else (lambda c: c)
    return [numpy.clip(numpy.rint(c), 0, 255).astype(numpy.uint8) for c in (y, half(cb), half(cr))]


def codestream(tile, mode, work):
    th, tw = tile.shape[:2]
    if mode.startswith('ycbcr'):
        half = mode == 'ycbcr'
        source = os.path.join(work, 'tile.raw')
        with open(source, 'wb') as f:
            for plane in ycbcr_planes(tile, half):
                f.write(plane.tobytes())
        args = ['-F', f'{tw},{th},3,8,u@1x1:{2 if half else 1}x1:{2 if half else 1}x1', '-mct', '0']
    else:
        source = os.path.join(work, 'tile.ppm')
        with open(source, 'wb') as f:
            f.write(b'P6\n%d %d\n255\n' % (tw, th) + tile.tobytes())
        args = []
    out = os.path.join(work, 'tile.j2k')
    subprocess.run(['opj_compress', '-i', source, '-o', out, *args], check=True, stdout=subprocess.DEVNULL)
    with open(out, 'rb') as f:
        return f.read()


def tiles(level, th, tw, mode, work):
    h, w = level.shape[:2]
    padded = numpy.full((-(-h // th) * th, -(-w // tw) * tw, 3), 255, numpy.uint8)
    padded[:h, :w] = level
    for y in range(0, padded.shape[0], th):
        for x in range(0, padded.shape[1], tw):
            yield codestream(padded[y:y + th, x:x + tw], mode, work)


def main(source, out, mode, mpp):
    code = CODES[mode]
    tifffile.TIFF.COMPRESSORS._codecs[code] = refuse
    with tifffile.TiffFile(source) as src, tifffile.TiffWriter(out) as tif, tempfile.TemporaryDirectory() as work:
        pages = [p for p in src.pages if p.is_tiled]
        h0, w0 = pages[0].shape[:2]
        space = 'YUV' if mode.startswith('ycbcr') else 'RGB'
        for k, page in enumerate(pages):
            h, w = page.shape[:2]
            th, tw = page.tilelength, page.tilewidth
            head = f'Aperio Image Library v12.0.15 \r\n{w0}x{h0} [0,0 {w0}x{h0}] ({tw}x{th}) J2K/{space} Q=100'
            description = f'{head}|AppMag = 20|MPP = {mpp}' if k == 0 else f'{head} -> {w}x{h} - |AppMag = 20|MPP = {mpp}'
            tif.write(
                tiles(page.asarray()[..., :3], th, tw, mode, work),
                shape=(h, w, 3),
                dtype=numpy.uint8,
                tile=(th, tw),
                compression=code,
                photometric='rgb',
                description=description,
                metadata=None,
            )


if __name__ == '__main__':
    main(*sys.argv[1:])
