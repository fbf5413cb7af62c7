// Opens a slide with the built-in TIFF reader (pyramidal TIFF, Aperio SVS with JPEG or
// LZW/deflate tiles).
import { SlideError, type Slide } from './slide.js';
import { TiffSlide } from './tiff-slide.js';

export async function openSlide(path: string): Promise<Slide> {
  try {
    return await TiffSlide.open(path);
  } catch (err) {
    if (err instanceof SlideError) throw err;
    throw new SlideError(`${path}: not a slide the TIFF reader can open (${(err as Error).message})`);
  }
}
