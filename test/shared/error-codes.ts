// The error registry (src/lib/errors.ts) is the one list of codes: docs/error-codes.md's table is
// that list, and every code is one the code (the service, tile-infer, the npm run tools) can throw.
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorCodes, errors, ServiceError } from '../../src/lib/errors.js';
import { ROOT } from '../helpers/server.js';

const sources = (dir: string): string[] =>
  readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => readFileSync(join(ROOT, dir, f), 'utf8'));

t.test("docs/error-codes.md's table lists every code, its status and meaning, in the registry's order", async (t) => {
  const page = readFileSync(join(ROOT, 'docs', 'error-codes.md'), 'utf8');
  const rows = page.split('\n').filter((l) => l.startsWith('| `'));
  t.same(
    rows,
    errorCodes().map(({ code, status, meaning }) => `| \`${code}\` | ${status ?? ''} | ${meaning} |`),
  );
});

t.test('every code is thrown somewhere (a PNG code by its rule)', async (t) => {
  // The registry's keys are bare names: a quoted code is a use (the HTTP API's in the errors
  // constructors beside the registry).
  const code = [...sources('src'), ...sources('supervisor'), ...sources('tools')].join('\n');
  for (const { code: c } of errorCodes()) {
    const rule = /^TILE_ERR_PNG_(.*)$/.exec(c)?.[1].toLowerCase();
    // fail('rule', ...) whether the formatter puts the arguments on the call's line or below it.
    t.ok(rule ? new RegExp(`fail\\(\\s*'${rule}'`).test(code) : code.includes(`'${c}'`), c);
  }
});

t.test('a wire error says whether the tile may run elsewhere; the code alone does not', async (t) => {
  const gone = errors.workerGone('the device failed');
  t.equal(ServiceError.fromWire(gone.toWire(true)).retryable, true, 'a worker that did not run the tile');
  t.equal(ServiceError.fromWire(gone.toWire()).retryable, false, 'the same code, not said retryable');
  t.notOk('retryable' in gone.toWire(), 'nothing on the wire unless said');
});
