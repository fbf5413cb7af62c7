// A model's tensors in the Open Inference Protocol, derived from its package manifest alone, so a
// new model folder needs no code: inputs `image` (UINT8 [N, H, W, 3] raw RGB; BYTES [N] PNG files
// are taken too), `bulk_rna` FP32 [N, G] for models with input genes, `resolution` (MPP) FP32
// [N]; outputs by task: `mask` UINT8 [N, H, W] and `tissue_ratio` FP32 [N] (segmentation),
// `prediction` FP32 [N, G], `embedding` FP32 [N, D]. -1 is a dimension of any size (the batch).
import type { Manifest } from '../../model-package/manifest.js';
import type { OutputDatatype } from './tensor-data.js';

export interface TensorMetadata {
  name: string;
  datatype: string;
  shape: number[];
}

export type OutputName = 'mask' | 'tissue_ratio' | 'prediction' | 'embedding';

/** Triton's name for an ONNX Runtime model. */
export const PLATFORM = 'onnxruntime_onnx';

/** The graph's last dimension of a tensor ("float32[batch,21]" gives 21), or -1. */
function lastDim(manifest: Manifest, tensor: string | undefined): number {
  const dims = tensor ? /\[(.*)\]$/.exec(manifest.graph?.outputs[tensor] ?? '')?.[1].split(',') : undefined;
  const last = Number(dims?.at(-1));
  return Number.isInteger(last) && last > 0 ? last : -1;
}

/** FP64 for an output the graph gives as float64 (its values as the contract's routes write
 *  them); FP32 otherwise. */
export function outputDatatype(manifest: Manifest, role: 'prediction' | 'embedding'): OutputDatatype {
  const tensor = manifest.tensors[role];
  return tensor && /^(float64|double)/.test(manifest.graph?.outputs[tensor] ?? '') ? 'FP64' : 'FP32';
}

/** Whether the model takes bulk RNA: it predicts from input genes. */
export const takesBulk = (manifest: Manifest): boolean =>
  !!manifest.genes && !!manifest.tensors.bulk && manifest.tasks.includes('prediction');

export function inputsOf(manifest: Manifest): TensorMetadata[] {
  const { width, height } = manifest.tile;
  return [
    { name: 'image', datatype: 'UINT8', shape: [-1, height, width, 3] },
    ...(takesBulk(manifest) ? [{ name: 'bulk_rna', datatype: 'FP32', shape: [-1, manifest.genes!.input.length] }] : []),
    { name: 'resolution', datatype: 'FP32', shape: [-1] },
  ];
}

export function outputsOf(manifest: Manifest): (TensorMetadata & { name: OutputName; datatype: OutputDatatype })[] {
  const { width, height } = manifest.tile;
  if (manifest.tasks.includes('segmentation')) {
    return [
      { name: 'mask', datatype: 'UINT8', shape: [-1, height, width] },
      { name: 'tissue_ratio', datatype: 'FP32', shape: [-1] },
    ];
  }
  const genes = manifest.genes?.output.length ?? lastDim(manifest, manifest.tensors.prediction);
  const dim = manifest.embedding_dim ?? lastDim(manifest, manifest.tensors.embedding);
  return [
    ...(manifest.tasks.includes('prediction')
      ? [{ name: 'prediction' as const, datatype: outputDatatype(manifest, 'prediction'), shape: [-1, genes] }]
      : []),
    ...(manifest.tasks.includes('embedding')
      ? [{ name: 'embedding' as const, datatype: outputDatatype(manifest, 'embedding'), shape: [-1, dim] }]
      : []),
  ];
}

/** The model metadata response (GET /v2/models/{model}, gRPC ModelMetadata). */
export function modelMetadata(name: string, manifest: Manifest) {
  return {
    name,
    versions: [manifest.version],
    platform: PLATFORM,
    inputs: inputsOf(manifest),
    outputs: outputsOf(manifest),
  };
}
