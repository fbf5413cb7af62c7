// The supervisor's modules in-process: restart backoff, the worker life cycle, model pools, GPU placement, the systemd units, diagnostics' anonymizer, the usage log.
// One test process for these files: tap costs each process ~1.3 s of CPU (its loaders and process
// info), which for files this small was most of their time.
import './supervisor/restart-policy.js';
import './supervisor/worker-life-cycle.js';
import './supervisor/model-pool.js';
import './supervisor/gpu-assignment.js';
import './supervisor/systemd.js';
import './supervisor/anonymize.js';
import './supervisor/usage-log.js';
