// A remote slide's reader, chosen by its first bytes: TIFF, SVS and OME-TIFF by the built-in TIFF
// reader over the byte source, a DICOM file by the DICOM reader (its series, as remote-files.ts
// finds it).
import { isDicomHead } from '../dicom/files.js';
import { openRemoteDicom } from '../dicom/remote-files.js';
import { SlideError, type Slide } from '../slide.js';
import { TiffSlide } from '../tiff-slide.js';
import type { ByteSource } from './source.js';

/** II*\0, MM\0*, and BigTIFF's II+\0, MM\0+. */
const isTiff = (b: Uint8Array) =>
  (b[0] === 0x49 && b[1] === 0x49 && (b[2] === 42 || b[2] === 43) && b[3] === 0) ||
  (b[0] === 0x4d && b[1] === 0x4d && b[2] === 0 && (b[3] === 42 || b[3] === 43));

export async function openRemoteSlide(url: string, source: ByteSource): Promise<Slide> {
  const head = await source.read(0, 132);
  if (isTiff(head)) return TiffSlide.open(url, source);
  if (isDicomHead(head)) return openRemoteDicom(url, source);
  throw new SlideError(
    'TILE_ERR_SLIDE_FORMAT',
    `${url}: neither TIFF nor DICOM (its first bytes are ${Buffer.from(head.subarray(0, 4)).toString('hex')}); remote slides are read as TIFF, SVS, OME-TIFF or DICOM`,
  );
}
