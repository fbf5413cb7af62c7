// The layer rules as code: npm run lint:layers explains each violation, and test/layers.test.ts
// checks them in npm test. Process roles (supervisor/, src/front, src/worker, src/client) never
// import each other; shared modules sit in levels and import only lower levels: lib at the
// bottom; config, tile, gpu and model-package on it; contract above model-package; ipc above
// those. Build-time code (tools/, bench/) and test/ may import anything, and nothing at run time
// imports them.
const SHARED = ['lib', 'config', 'tile', 'gpu', 'model-package', 'contract', 'ipc'];
/** What each shared module may import besides itself (and node and npm packages). */
const BELOW = {
  lib: [],
  config: ['lib'],
  tile: ['lib'],
  gpu: ['lib'],
  'model-package': ['lib'],
  contract: ['lib', 'config', 'tile', 'gpu', 'model-package'],
  ipc: ['lib', 'config', 'tile', 'gpu', 'model-package', 'contract'],
};
const folders = (names) => `^src/(${names.join('|')})/`;
/** Any of the repository's own code. */
const OURS = '^(src|supervisor|tools|bench|test)/';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import cycles anywhere.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'runtime-imports-build-or-test',
      severity: 'error',
      comment: 'Nothing under src/ or supervisor/ imports tools/, bench/ or test/: they are not shipped to run.',
      from: { path: '^(src|supervisor)/' },
      to: { path: '^(tools|bench|test)/' },
    },
    {
      name: 'role-imports-another-role',
      severity: 'error',
      comment:
        'A process role (supervisor/, src/front, src/worker, src/client) imports only its own folder and shared modules.',
      from: { path: '^(supervisor|src/front|src/worker|src/client)/' },
      to: { path: '^(supervisor|src/front|src/worker|src/client)/', pathNot: '^$1/' },
    },
    {
      name: 'client-imports-server-module',
      severity: 'error',
      comment:
        'The whole-slide client (tile-infer) needs only the HTTP contract, the tile codecs and lib of the shared modules.',
      from: { path: '^src/client/' },
      to: { path: folders(SHARED.filter((m) => !['contract', 'tile', 'lib'].includes(m))) },
    },
    ...SHARED.map((module) => ({
      name: `shared-${module}-imports-above`,
      severity: 'error',
      comment: `src/${module} imports only ${BELOW[module].length ? BELOW[module].map((m) => `src/${m}`).join(', ') : 'node and npm packages'} of the repository: shared modules depend one way, and never on a role, tools/, bench/ or test/.`,
      from: { path: `^src/${module}/` },
      to: { path: OURS, pathNot: folders([module, ...BELOW[module]]) },
    })),
    {
      name: 'onnxruntime-not-through-lib',
      severity: 'error',
      comment:
        'ONNX Runtime is loaded only through src/lib/onnxruntime.ts, which turns its telemetry off before the runtime reads its environment (types only are fine).',
      from: { pathNot: '^src/lib/onnxruntime\\.ts$' },
      to: { path: '^node_modules/onnxruntime-node/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'runtime-imports-dev-dependency',
      severity: 'error',
      comment:
        'Code that runs in production imports no devDependency (npm ci --omit=dev leaves them out); types only are fine.',
      from: { path: '^(src|supervisor)/' },
      to: { dependencyTypes: ['npm-dev'], dependencyTypesNot: ['type-only'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
