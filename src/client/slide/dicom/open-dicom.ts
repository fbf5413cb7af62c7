// DICOM WSI slides: a folder of DICOM files, one instance of a series (its series, from the
// instances in its folder), the same in object storage or over HTTP (remote-files.ts), or a
// DICOMweb series or study URL. A slide's identity is its series'
// UID, so that resumes and reruns know it wherever its copy lies.
import { readdirSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import type { ByteSource } from '../remote/source.js';
import { SlideError } from '../slide.js';
import { DicomSlide } from './dicom-slide.js';
import { DicomWebFrames, parseDicomWebUrl, seriesInstances, seriesUrl, studySeries } from './dicomweb.js';
import { isDicomFile, locateFrames, readInstance, seriesFiles } from './files.js';
import { buildPyramid, seriesOf, wsiInstances } from './pyramid.js';
import { isRemoteDicom, openRemoteDicom, remoteSeries } from './remote-files.js';

/** Which DICOM reader a slide path is for, or null when it is not DICOM. */
export function dicomKind(path: string): 'dicom' | 'remote' | 'dicomweb' | null {
  if (parseDicomWebUrl(path)) return 'dicomweb';
  if (isRemoteDicom(path)) return 'remote';
  try {
    if (statSync(path).isDirectory()) return 'dicom';
  } catch {
    return null;
  }
  return extname(path).toLowerCase() === '.dcm' || isDicomFile(path) ? 'dicom' : null;
}

/** The series UID of a DICOM slide path, read from the first DICOM file of a folder (local or
 *  remote), the file, or the URL; null for other paths (and for a study URL, or a local folder with
 *  no DICOM file). A remote series that cannot be read now, or that has no DICOM instance, fails
 *  (its identity is not guessed), and its first instance's source comes with its UID, for its
 *  reader (openDicom's `opened`). */
export async function dicomSeries(path: string): Promise<{ uid: string | null; source?: ByteSource }> {
  const kind = dicomKind(path);
  if (kind === 'dicomweb') return { uid: parseDicomWebUrl(path)!.series };
  if (kind === 'remote') return remoteSeries(path);
  if (!kind) return { uid: null };
  try {
    const file = statSync(path).isDirectory()
      ? readdirSync(path)
          .sort()
          .map((n) => join(path, n))
          .find((p) => isDicomFile(p))
      : path;
    return { uid: file ? seriesOf(readInstance(file)) || null : null };
  } catch {
    return { uid: null };
  }
}

/** A study URL's slides: its WSI series' URLs; any other path as it is. */
export async function expandStudy(path: string): Promise<string[]> {
  const url = parseDicomWebUrl(path);
  return url && !url.series ? studySeries(url) : [path];
}

/** `opened`: a remote series' first instance, open already (dicomSeries). */
export async function openDicom(path: string, opened?: ByteSource): Promise<DicomSlide> {
  if (isRemoteDicom(path)) return openRemoteDicom(path, opened);
  const url = parseDicomWebUrl(path);
  if (!url) {
    const instances = wsiInstances(path, seriesFiles(path));
    const pyramid = buildPyramid(path, instances);
    // Every frame's place in its file, now: a missing frame or a truncated file fails here.
    for (const l of pyramid.levels) for (const k of l.members) locateFrames(instances[k]);
    return new DicomSlide(path, 'dicom', pyramid, {
      frames: async (at) =>
        at.map(({ instance, frame }) => {
          const i = instances[instance];
          return { path: i.path, offset: i.frames![frame * 2], length: i.frames![frame * 2 + 1] };
        }),
      close: async () => {},
    });
  }
  let series = url.series ? path.replace(/\/$/, '') : null;
  if (!series) {
    const all = await studySeries(url);
    if (all.length !== 1)
      throw new SlideError(
        'TILE_ERR_SLIDE_SERIES',
        `${path}: a study of ${all.length} slide series (modality SM)${all.length ? `: ${all.join(', ')}` : ''}; give one series URL`,
      );
    series = seriesUrl(url, parseDicomWebUrl(all[0])!.series!);
  }
  const instances = wsiInstances(series, await seriesInstances(series));
  const pyramid = buildPyramid(series, instances);
  return new DicomSlide(path, 'dicomweb', pyramid, new DicomWebFrames(instances));
}
