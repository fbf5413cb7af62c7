"""Rewrites a DICOM instance's encapsulated frames with an Extended Offset Table (pydicom's
encapsulate_extended) and an empty Basic Offset Table, as writers of files over 4 GiB must:
the test copy for readers that place frames by either table.

usage: dicom-eot.py IN.dcm OUT.dcm
"""
import sys

import pydicom
from pydicom.encaps import encapsulate_extended, generate_pixel_data_frame

source, target = sys.argv[1], sys.argv[2]
ds = pydicom.dcmread(source)
frames = list(generate_pixel_data_frame(ds.PixelData, int(ds.NumberOfFrames)))
pixels, offsets, lengths = encapsulate_extended(frames)
ds.PixelData = pixels
ds.ExtendedOffsetTable = offsets
ds.ExtendedOffsetTableLengths = lengths
ds.save_as(target, write_like_original=False)
