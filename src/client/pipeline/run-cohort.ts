// A cohort's slides through the pipeline, several in flight so that one slide's tissue detection,
// opening and output writing overlap another's tiles: no stall between slides.
import { availableParallelism } from 'node:os';
import { CodedError, errorLine } from '../../lib/errors.js';
import { Semaphore } from '../semaphore.js';
import type { CohortProgress } from '../progress.js';
import type { CohortSlide, Summary } from './cohort.js';
import { processSlide, type SlideRun } from './process-slide.js';

/** Slides in flight by default: two (one's tiles flow while the next is opened and its tissue
 *  found), more on hosts with many cores, whose reader pool a single slide may not fill. */
export const defaultSlidesInFlight = () => Math.max(2, Math.min(8, Math.ceil(availableParallelism() / 4)));

/** Slides `inFlight` at a time, each recorded in the summary as it finishes. */
export async function runCohort(
  run: SlideRun,
  cohort: CohortSlide[],
  inFlight: number,
  summary: Summary,
  progress: Pick<CohortProgress, 'slideDone'>,
): Promise<void> {
  const { client } = run;
  const slots = new Semaphore(inFlight);
  const running: Promise<void>[] = [];
  for (const entry of cohort) {
    const release = await slots.acquire();
    running.push(
      (async () => {
        const started = performance.now();
        const retries = client.retries;
        try {
          const r = await processSlide(run, entry);
          const seconds = r.seconds ?? (performance.now() - started) / 1000;
          summary.record({
            slide: entry.label,
            status: 'done',
            tiles: r.tiles,
            seconds,
            reason: r.warnings.join('; '),
          });
          progress.slideDone(
            r.skipped
              ? `${entry.label}: finished before (${r.tiles} tiles); skipped`
              : `${entry.label}: ${r.tiles} tiles in ${seconds.toFixed(1)} s, ${client.retries - retries} retries; wrote ${r.files.join(', ')}`,
          );
        } catch (err) {
          recordFailure(summary, progress, entry.label, started, err as Error);
        } finally {
          release();
        }
      })(),
    );
  }
  await Promise.all(running);
}

/** A slide (or tile folder) that failed: its summary row and its progress line give one reason. */
export function recordFailure(
  summary: Summary,
  progress: Pick<CohortProgress, 'slideDone'>,
  label: string,
  started: number,
  err: Error,
): void {
  // Every failure is recorded with a code: one without (a reader meeting what it does not check,
  // "sets.map is not a function") is said to be unexpected, with the message it had.
  const reason = errorLine(err instanceof CodedError ? err : new CodedError('TILE_ERR_CLIENT_UNEXPECTED', err.message));
  summary.record({ slide: label, status: 'failed', tiles: 0, seconds: (performance.now() - started) / 1000, reason });
  progress.slideDone(`${label}: failed: ${reason}`);
}
