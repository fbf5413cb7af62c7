// The HTTP front's modules in-process: admission and the worker's deadlines, the response writer, validation errors, the model client, the fronts' shares of the connections, the gRPC message decoder, wire limits and tensor contents, the /docs examples.
// One test process for these files: tap costs each process ~1.3 s of CPU (its loaders and process
// info), which for files this small was most of their time.
import './front/overload-logic.js';
import './front/response-writer.js';
import './front/validation-error.js';
import './front/model-client.js';
import './front/fronts-routing.js';
import './front/connection-share.js';
import './front/message-decoder.js';
import './front/wire-limits.js';
import './front/tensor-contents.js';
import './front/route-docs.js';
