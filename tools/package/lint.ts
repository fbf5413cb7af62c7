// The checks a package must pass before it is served, run from the command line: no TODO left
// from the skeleton, the manifest schema and its checks against the graph, then a warm-up
// through the worker's own code path at the largest batch it will run.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CodedError } from '../../src/lib/errors.js';
import { readPackage } from '../../src/model-package/model-package.js';
import { ModelSession } from '../../src/worker/model-session.js';
import { ModelWorker } from '../../src/worker/model-worker.js';
import { todos } from './skeleton.js';

export interface LintReport {
  dir: string;
  /** Why the package would be refused, one line each ("[CODE] ..." where the error has one);
   *  empty when it serves. */
  problems: string[];
  /** What the service will do differently from the manifest, and the warm-up. */
  notes: string[];
}

export async function lintPackage(dir: string): Promise<LintReport> {
  const report: LintReport = { dir, problems: [], notes: [] };
  const file = join(dir, 'manifest.json');
  try {
    report.problems = todos(JSON.parse(readFileSync(file, 'utf8'))).map((todo) => `${file}: ${todo}`);
  } catch {
    // readPackage below says why the manifest cannot be read.
  }
  if (report.problems.length) return report;
  let session: ModelSession | null = null;
  try {
    const pkg = readPackage(dir);
    session = await ModelSession.open(pkg, {
      intraOpThreads: 1,
      provider: ['cpu'],
      gpu: null,
      gpuPci: null,
      gpuUuid: null,
    });
    report.notes.push(...session.plan.warnings);
    const worker = new ModelWorker(pkg, session, { maxBatch: 0, maxDelayMs: 0, batchShapes: [session.plan.maxBatch] });
    const started = performance.now();
    await worker.warmup(1);
    report.notes.push(
      `warm-up: a batch of ${session.plan.maxBatch} synthetic tiles in ${Math.round(performance.now() - started)} ms; sha256 ${pkg.sha256}`,
    );
  } catch (err) {
    const line = (err as Error).message.split('\n')[0];
    report.problems.push(err instanceof CodedError ? `[${err.code}] ${line}` : line);
  } finally {
    await session?.close();
  }
  return report;
}
