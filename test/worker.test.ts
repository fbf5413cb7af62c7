// The model worker's modules in-process: the serving loop, packages as exporters write them, the PNG rules and decoder, the image tensor, bulk RNA counts.
// One test process for these files: tap costs each process ~1.3 s of CPU (its loaders and process
// info), which for files this small was most of their time.
import './worker/model-worker.js';
import './worker/model-exports.js';
import './worker/png.js';
import './worker/preprocess.js';
import './worker/bulk.js';
import './worker/load-failure.js';
