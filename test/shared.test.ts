// The shared modules: the error registry, the log, the IPC channel, configuration errors, GPU plumbing.
// One test process for these files: tap costs each process ~1.3 s of CPU (its loaders and process
// info), which for files this small was most of their time.
import './shared/error-codes.js';
import './shared/logger.js';
import './shared/ipc.js';
import './shared/config.js';
import './shared/gpu.js';
