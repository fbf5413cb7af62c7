// The Open Inference Protocol over the models a front serves: server and model health, metadata
// and inference, answered the same whichever transport asked (plugins/v2.ts for REST,
// grpc-server.ts for gRPC). A request's tiles go to one worker as one message and run in its
// batch shapes, so each tile's outputs are the bytes the contract's routes give it.
import type { ServiceConfig } from '../../config/config.js';
import type { Manifest } from '../../model-package/manifest.js';
import { readManifest } from '../../model-package/model-package.js';
import { errors } from '../../lib/errors.js';
import { SERVICE_VERSION } from '../../lib/version.js';
import {
  unavailable,
  type InferOptions,
  type ModelBackend,
  type Evictable,
  type RequestBytes,
  type Ticket,
  type Upload,
} from '../backend.js';
import type { InferResult } from '../../ipc/protocol.js';
import { assemble, planJobs, type InferRequest } from './inference.js';
import { modelMetadata } from './model-tensors.js';
import type { OutputTensor } from './tensor-data.js';

/** The protocol extensions served. */
export const EXTENSIONS = ['binary_tensor_data'];

export interface InferResponse {
  model_name: string;
  model_version: string;
  id?: string;
  /** `trained`: whether the model's weights were trained (its manifest's provenance), said with
   *  every answer as the contract's metadata says it: outputs of untrained weights mean nothing. */
  parameters: { trained: boolean };
  outputs: OutputTensor[];
  /** The package digest of the model that answered, sent beside the body as the contract's routes
   *  send it (x-model-sha256: a REST header, gRPC initial metadata). A request's tiles run on one
   *  worker; only tiles retried on another during a reload can name two, listed in tile order. */
  sha256: string;
}

export class V2Service {
  /** Each model's manifest as read at start, for metadata while it loads. */
  private readonly planned = new Map<string, Manifest | null>();

  constructor(
    private readonly backend: ModelBackend,
    private readonly config: ServiceConfig,
  ) {
    for (const entry of config.models) {
      try {
        this.planned.set(entry.name, readManifest(entry.path!));
      } catch {
        this.planned.set(entry.name, null);
      }
    }
  }

  serverMetadata() {
    return { name: 'tile-inference-service', version: SERVICE_VERSION, extensions: EXTENSIONS };
  }

  /** Ready as /health/ready is: every model ready (failed ones aside without strict readiness),
   *  and not draining for a stop. */
  ready(): boolean {
    if (this.backend.draining) return false;
    return this.backend
      .models()
      .every((m) => m.state === 'ready' || (m.state === 'failed' && !this.config.health.strict_readiness));
  }

  /** The model's manifest (as loaded, or as read at start while it loads); 404 for a model not
   *  enabled or a version it does not serve, 503 when its package could not even be read. */
  manifest(name: string, version?: string): Manifest {
    const manifest = this.known(name, version);
    if (!manifest) throw unavailable(name, this.backend.model(name)) ?? errors.modelLoading(name);
    return manifest;
  }

  /** A failed or loading model is not ready (false), rather than an error. */
  modelReady(name: string, version?: string): boolean {
    this.known(name, version);
    return !this.backend.draining && this.backend.model(name)?.state === 'ready';
  }

  /** The manifest of an enabled model (null when unreadable); 404 for another name or version. */
  private known(name: string, version?: string): Manifest | null {
    const view = this.backend.model(name);
    if (!this.planned.has(name) || !view) throw errors.modelNotFound(`model '${name}'`, [...this.planned.keys()]);
    const manifest = view.info?.manifest ?? this.planned.get(name) ?? null;
    // An empty version (REST's /versions//) is not one it serves; gRPC's empty model_version is
    // none at all, and comes here as undefined.
    if (version !== undefined && manifest && version !== manifest.version)
      throw errors.modelNotFound(`version '${version}' of model '${name}' (it serves version '${manifest.version}')`, [
        ...this.planned.keys(),
      ]);
    return manifest;
  }

  modelMetadata(name: string, version?: string) {
    return modelMetadata(name, this.manifest(name, version));
  }

  /** Admission as the contract's routes have it (admission.ts), before the tiles are known: the
   *  ticket, or the error to answer. Each tile takes its own place in the queue when sent. */
  admit(name: string, version?: string, upload?: Upload): Ticket {
    this.manifest(name, version);
    return this.backend.admit(name, 1, upload);
  }

  /** A gRPC message's bytes as they arrive, before it names its model, or an answer's (backend.ts). */
  requestBytes(control?: boolean, client?: Evictable): RequestBytes {
    return this.backend.requestBytes(control, client);
  }

  /** Runs a request's tiles on a ready instance of the model, as one message to one worker; each
   *  tile holds a place of `options.ticket` until the worker is done with it, and is dropped at
   *  the model's deadline or when `options.signal` aborts (the client left). */
  async infer(
    name: string,
    version: string | undefined,
    request: InferRequest,
    options: InferOptions,
  ): Promise<InferResponse> {
    this.manifest(name, version);
    const view = this.backend.model(name);
    const error = unavailable(name, view);
    if (error) throw error;
    const manifest = view?.info?.manifest;
    if (!manifest) throw errors.modelLoading(name);
    const plan = planJobs(manifest, request, this.config.max_tile_pixels);
    const results = await this.backend.inferBatch(name, plan.jobs, options);
    const outputs = assemble(manifest, results, plan.outputs);
    return {
      model_name: name,
      model_version: manifest.version,
      ...(request.id !== undefined && { id: request.id }),
      parameters: { trained: manifest.provenance.trained },
      outputs,
      // Every tile is a result here: assemble answered the first that failed instead.
      sha256: [...new Set(results.map((r) => (r as InferResult).sha256))].join(', '),
    };
  }
}
