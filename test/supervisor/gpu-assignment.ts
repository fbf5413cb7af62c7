// Placing worker instances on GPUs: explicit lists, "auto" round-robin, CPU without GPUs.
import t from 'tap';
import { assignGpus } from '../../supervisor/gpus.js';

const entry = (name: string, instances: number, gpus: 'auto' | string[]) => ({
  name,
  instances,
  gpus,
  provider: 'auto' as const,
  batch_shapes: 'auto' as const,
  max_queue_delay_ms: 2,
  max_queue: 64,
  request_timeout_ms: 1000,
});

t.test('assignGpus: explicit lists per model, auto round-robin across models, CPU without GPUs', async (t) => {
  const plan = assignGpus(
    [entry('a', 3, 'auto'), entry('b', 2, ['7']), entry('c', 2, 'auto'), entry('d', 1, [])],
    ['0', '1'],
  );
  t.same(Object.fromEntries(plan), { a: ['0', '1', '0'], b: ['7', '7'], c: ['1', '0'], d: [null] });
  t.same(Object.fromEntries(assignGpus([entry('a', 2, 'auto')], [])), { a: [null, null] });
});
