// Opens a slide: TIFF and SVS with the built-in reader (no system library); anything it cannot
// read (other formats, JPEG 2000 SVS, ...) through libopenslide when it is installed.
import { extname } from 'node:path';
import { OpenSlideSlide, openSlideLibrary } from './openslide-slide.js';
import { SlideError, type Slide } from './slide.js';
import { TiffSlide } from './tiff-slide.js';

const TIFF_EXTENSIONS = new Set(['.tif', '.tiff', '.svs']);

export async function openSlide(path: string): Promise<Slide> {
  let tiffError: Error | null = null;
  if (TIFF_EXTENSIONS.has(extname(path).toLowerCase())) {
    try {
      return await TiffSlide.open(path);
    } catch (err) {
      tiffError = err as Error;
    }
  }
  if (openSlideLibrary()) return OpenSlideSlide.open(path);
  const reason = tiffError ? `the TIFF reader says: ${tiffError.message}; ` : '';
  throw new SlideError('TILE_ERR_SLIDE_FORMAT', `${path}: ${reason}other formats need libopenslide (Debian/Ubuntu: apt-get install libopenslide0)`);
}
