// Optional system libraries (libopenslide, libturbojpeg) through koffi: the first of their usual
// names that loads, or null when none is installed.
import koffi, { type LibraryHandle } from 'koffi';

export function loadLibrary(names: readonly string[]): LibraryHandle | null {
  for (const name of names) {
    try {
      return koffi.load(name);
    } catch {
      // not this name: try the next
    }
  }
  return null;
}
