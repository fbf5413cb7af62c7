// A few hundred fuzzed requests against one real service tree (seconds; `npm run fuzz` runs
// thousands against every model): never a 5xx, and the service healthy afterwards.
import t from 'tap';
import { startServer } from './helpers/server.js';
import { fuzzService } from './helpers/fuzz.js';

const runs = Number(process.env.FUZZ_RUNS ?? 300);
// Pressure is off: the fuzz is about inputs, and a loaded test machine must not turn into 503s.
const server = await startServer({
  models: [{ name: 'gene-expr', gpus: [], intra_op_threads: 1, request_timeout_ms: 60000 }],
});
t.teardown(() => server.stop());

t.test(`${runs} fuzzed requests: never a 5xx, healthy afterwards`, (t) => fuzzService(t, server, ['gene-expr'], runs));
