// DICOM copies of a bench slide for bench:slide's sources: OrthancWSIDicomizer's folders with
// whole levels in one instance each (--max-size 0) and with its default 10 MB instances (levels
// split), and the latter served by a local Orthanc's DICOMweb.
import { join } from 'node:path';
import type { CohortSlide } from '../src/client/pipeline/cohort.js';
import { dicomize, startOrthanc, uidsOf } from '../tools/orthanc.js';

export interface SourceCopies {
  copies: { source: string; slide: CohortSlide }[];
  /** The levels-split copy's files. */
  files: string[];
  stop(): Promise<void>;
}

/** `size`: the slide's width and height in mm (given the converter swapped: its 1.1 computes
 *  PixelSpacing with them swapped). */
export async function dicomCopies(
  tiff: string,
  size: [number, number],
  dir: string,
  smoke: boolean,
): Promise<SourceCopies> {
  const whole = join(dir, 'dicom-whole');
  const split = join(dir, 'dicom-split');
  // The smoke checks that each kind of source runs: the split copy alone (Orthanc serves it).
  if (!smoke) await dicomize(tiff, whole, [size[1], size[0]], ['--max-size', '0']);
  const files = await dicomize(tiff, split, [size[1], size[0]]);
  const orthanc = await startOrthanc();
  try {
    await orthanc.upload(files);
    const { study, series } = await uidsOf(files[0]);
    const url = `${orthanc.dicomWeb}/studies/${study}/series/${series}`;
    return {
      copies: [
        ...(smoke
          ? []
          : [
              {
                source: 'DICOM files, whole levels',
                slide: { label: 'dicom-whole', path: whole, stem: 'dicom-whole', from: 'the bench' },
              },
            ]),
        {
          source: `DICOM files, levels split (${files.length} instances)`,
          slide: { label: 'dicom-split', path: split, stem: 'dicom-split', from: 'the bench' },
        },
        { source: 'DICOMweb, local Orthanc', slide: { label: url, path: url, stem: series, from: 'the bench' } },
      ],
      files,
      stop: () => orthanc.stop(),
    };
  } catch (err) {
    await orthanc.stop();
    throw err;
  }
}
