// Restart backoff of workers and fronts.
import t from 'tap';
import { RestartPolicy } from '../../supervisor/restart-policy.js';

t.test('restart backoff doubles to a cap and resets after a long run', async (t) => {
  const policy = new RestartPolicy({ initialDelayMs: 100, maxDelayMs: 1000, resetAfterMs: 60000 });
  t.same(
    [0, 0, 0, 0, 0, 0].map(() => policy.nextDelay(10)),
    [100, 200, 400, 800, 1000, 1000],
  );
  t.equal(policy.nextDelay(60000), 100, 'a worker that stayed up a minute starts over');
  t.equal(policy.nextDelay(5), 200);
});
