// A failed load always names a code: readiness, /api/models and /diagnostics showed errorCode
// null for an error without one ("load failed: Array buffer allocation failed").
import t from 'tap';
import { loadFailure } from '../../src/worker/load-failure.js';
import { PackageError } from '../../src/model-package/model-package.js';
import { NoProviderError } from '../../src/worker/providers.js';

t.test('every load failure has a code; the package is at fault unless the error is transient', async (t) => {
  t.same(loadFailure(new RangeError('Array buffer allocation failed')), {
    reason: 'Array buffer allocation failed',
    packageFault: true,
    code: 'TILE_ERR_MODEL_LOAD',
  });
  t.same(loadFailure(new Error('listen EADDRINUSE /run/tile/w.sock')).code, 'TILE_ERR_MODEL_LOAD');
  t.same(loadFailure('a thrown string'), {
    reason: 'a thrown string',
    packageFault: true,
    code: 'TILE_ERR_MODEL_LOAD',
  });
  t.same(loadFailure(new Error('CUDA failure 2: out of memory')), {
    reason: 'CUDA failure 2: out of memory',
    packageFault: false,
    code: 'TILE_ERR_MODEL_LOAD',
  });
  t.equal(loadFailure(new PackageError('TILE_ERR_PACKAGE_GRAPH', 'no input x')).code, 'TILE_ERR_PACKAGE_GRAPH');
  t.same(loadFailure(new NoProviderError('cuda: not installed')), {
    reason: 'cuda: not installed',
    packageFault: true,
    code: 'TILE_ERR_MODEL_NO_PROVIDER',
  });
});
