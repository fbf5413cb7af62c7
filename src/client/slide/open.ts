// Opens a slide: TIFF and SVS with the built-in reader (no system library); anything it cannot
// read (other formats; JPEG 2000 SVS, which it reads only where libopenslide is missing) through
// libopenslide when it is installed. A path that is missing, a folder or unreadable is said so
// before any reader is asked.
import { accessSync, constants, statSync } from 'node:fs';
import { extname } from 'node:path';
import { dicomKind, openDicom } from './dicom/open-dicom.js';
import { OpenSlideSlide, openSlideLibrary } from './openslide-slide.js';
import { openRemoteSlide } from './remote/open-remote.js';
import { isRemote, openSource } from './remote/open-source.js';
import type { ByteSource } from './remote/source.js';
import { SlideError, type Slide } from './slide.js';
import { OpenSlideFirst, TiffSlide } from './tiff-slide.js';

const TIFF_EXTENSIONS = new Set(['.tif', '.tiff', '.svs']);

/** Why a path cannot be a slide file, or null when it is a readable file. */
export function unreadable(path: string): string | null {
  if (dicomKind(path)) return null; // a DICOM folder, or a DICOMweb URL
  try {
    if (!statSync(path).isFile()) return 'not a file';
    accessSync(path, constants.R_OK);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' ? 'not found' : code === 'EACCES' ? 'permission denied' : (err as Error).message;
  }
}

/** `source`: a remote slide's bytes, when the caller opened them already (http, https, s3). A
 *  DICOMweb URL is http(s) too: DICOM is asked first. */
export async function openSlide(path: string, source?: ByteSource): Promise<Slide> {
  if (dicomKind(path)) return openDicom(path, source);
  if (source ?? isRemote(path)) return openRemoteSlide(path, source ?? (await openSource(path)));
  const problem = unreadable(path);
  if (problem) throw new SlideError('TILE_ERR_SLIDE_MISSING', `${path}: ${problem}`);
  let tiffError: Error | null = null;
  if (TIFF_EXTENSIONS.has(extname(path).toLowerCase())) {
    try {
      return await TiffSlide.open(path);
    } catch (err) {
      tiffError = err as Error;
    }
  }
  if (openSlideLibrary()) {
    try {
      return OpenSlideSlide.open(path);
    } catch (err) {
      // JPEG 2000 tiles of a TIFF OpenSlide does not take (one it does not know as Aperio's).
      if (tiffError instanceof OpenSlideFirst) return TiffSlide.open(path, null, { builtInJ2k: true });
      // The TIFF reader's complaint is the more telling one for a TIFF it could not read.
      if (tiffError)
        throw new SlideError(
          tiffError instanceof SlideError ? tiffError.code : 'TILE_ERR_SLIDE_FORMAT',
          `${tiffError.message}; ${(err as Error).message.replace(`${path}: `, '')}`,
        );
      throw err;
    }
  }
  // A TIFF the reader knows but could not read (cut short, unreadable) is said as it is.
  if (tiffError instanceof SlideError && tiffError.code !== 'TILE_ERR_SLIDE_FORMAT') throw tiffError;
  const reason = tiffError ? `the TIFF reader says: ${tiffError.message}; ` : '';
  throw new SlideError(
    'TILE_ERR_SLIDE_FORMAT',
    `${path}: ${reason}other formats need libopenslide (Debian/Ubuntu: apt-get install libopenslide0)`,
  );
}
