// The long fuzz (`npm run fuzz`, and in the e2e tier): thousands of fuzzed requests (FUZZ_RUNS,
// default 2000) against the service with every shipped model: never a 5xx, healthy afterwards.
import t from 'tap';
import { DEFAULT_MODELS, startServer } from '../helpers/server.js';
import { fuzzService } from '../helpers/fuzz.js';

const runs = Number(process.env.FUZZ_RUNS ?? 2000);
// Pressure is off: the fuzz is about inputs, and a loaded test machine must not turn into 503s.
const models = DEFAULT_MODELS.map((m) => ({ ...m, gpus: [], request_timeout_ms: 60000 }));
const server = await startServer({ models });
t.teardown(() => server.stop());

t.test(`${runs} fuzzed requests: never a 5xx, healthy afterwards`, (t) =>
  fuzzService(
    t,
    server,
    models.map((m) => m.name),
    runs,
  ),
);
