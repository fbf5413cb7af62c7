// From an export to a manifest skeleton: what the graph says (tensor names, dtypes, shapes,
// dynamic or fixed batch, tile size) is filled in; what only the model's author knows (MPP,
// normalization, channel order, task, genes, provenance) is a "TODO: ..." string unless given
// on the command line, and the lint refuses the package until each one is replaced.
import type { TensorMeta, SessionSignature } from '../../src/model-package/model-package.js';
import { describeTensor } from '../../src/model-package/model-package.js';
import type { Task } from '../../src/model-package/manifest.js';

export const TODO = 'TODO:';

export interface KnownFacts {
  name: string;
  tasks?: Task[];
  mpp?: number;
  channelOrder?: 'RGB' | 'BGR';
  scale?: number;
  mean?: [number, number, number];
  std?: [number, number, number];
}

const num = (d: number | string | undefined) => (typeof d === 'number' ? d : undefined);
const rgb = (v: [number, number, number]) => ({ R: v[0], G: v[1], B: v[2] });

/** The manifest skeleton, as plain JSON (TODO strings where a value is the user's to give). */
export function manifestSkeleton(signature: SessionSignature, facts: KnownFacts): Record<string, unknown> {
  const inputs = signature.inputMetadata;
  const outputs = signature.outputMetadata;
  const rank = (m: TensorMeta) => m.shape?.length ?? 0;
  const image = inputs.find((m) => rank(m) === 4);
  const nhwc = image?.type === 'uint8' && num(image.shape?.[3]) === 3;
  const [height, width] = image ? (nhwc ? image.shape!.slice(1, 3) : image.shape!.slice(2, 4)).map(num) : [];
  const bulk = inputs.find((m) => rank(m) === 2);
  const mask = outputs.find((m) => rank(m) === 3 || rank(m) === 4);
  const flat = outputs.filter((m) => rank(m) === 2);
  const tasks: Task[] | undefined = facts.tasks ?? (mask && flat.length === 0 ? ['segmentation'] : undefined);

  // 2-D outputs go, in graph order, to the roles the tasks need.
  const tensors: Record<string, string> = { image: image?.name ?? `${TODO} the image input (none of rank 4 found)` };
  if (bulk) tensors.bulk = bulk.name;
  if (tasks?.includes('segmentation') && mask) tensors.mask = mask.name;
  const free = [...flat];
  for (const role of ['prediction', 'embedding'] as const) {
    if (!tasks?.includes(role)) continue;
    tensors[role] = free.shift()?.name ?? `${TODO} the ${role} output`;
  }
  if (!tasks && free.length) {
    const candidates = free.map((m) => `"${m.name}" (${describeTensor(m)})`).join(', ');
    tensors.embedding = `${TODO} one of ${candidates} under "embedding" and/or "prediction", as the tasks need`;
  }
  const embedding = tasks ? outputs.find((m) => m.name === tensors.embedding) : free[0];
  const channels = mask && rank(mask) === 4 ? num(mask.shape![1]) : 1;
  const floatMask = mask?.type?.startsWith('float');
  const batches = [...inputs, ...outputs].map((m) => m.shape?.[0]);
  const fixedBatch = batches.some((b) => typeof b === 'number');

  const userKnows = (what: string) => `${TODO} ${what}`;
  return {
    name: facts.name,
    version: '0.1.0',
    description: userKnows('what the model does and what it was trained on'),
    license: userKnows('the licence of the weights (SPDX id)'),
    tasks: tasks ?? [userKnows('segmentation, prediction and/or embedding')],
    tile: {
      width: width ?? userKnows('tile width in pixels (the graph leaves it open)'),
      height: height ?? userKnows('tile height in pixels (the graph leaves it open)'),
      mpp: facts.mpp ?? userKnows('microns per pixel the model was trained at'),
      mpp_tolerance: 0.1,
    },
    preprocess: nhwc
      ? {
          input: 'uint8',
          channel_order: facts.channelOrder ?? userKnows('"RGB" or "BGR", the order the graph expects'),
        }
      : {
          ...(image?.type === 'float16' && { input: 'float16' }),
          scale: facts.scale ?? userKnows('pixel scale, e.g. 1/255 = 0.00392156862745098'),
          mean: facts.mean
            ? rgb(facts.mean)
            : userKnows('mean per channel by name, {"R": r, "G": g, "B": b}, of the training normalization'),
          std: facts.std ? rgb(facts.std) : userKnows('std per channel by name, {"R": r, "G": g, "B": b}'),
          channel_order: facts.channelOrder ?? userKnows('"RGB" (torchvision, PIL) or "BGR" (OpenCV)'),
        },
    tensors,
    ...(mask &&
      (channels ?? 2) > 1 && {
        mask_channel: userKnows(
          `which of the ${channels ?? 'C'} channels of "${mask.name}" is tissue: {"index": i, "rule": "argmax"} or "threshold"`,
        ),
      }),
    ...(mask &&
      floatMask &&
      (channels ?? 2) === 1 && {
        mask_threshold: userKnows(
          `"${mask.name}" is ${mask.type}: tissue where value > threshold (0 for logits, 0.5 for probabilities)`,
        ),
      }),
    ...(bulk && {
      genes: {
        panel: userKnows('the gene panels and their source'),
        input: [userKnows(`${num(bulk.shape?.[1]) ?? 'the'} input gene symbols, in tensor order`)],
        output: [userKnows('output gene symbols, in tensor order')],
        bulk_transform: userKnows('"none", "log1p" or "log1p_cp10k"'),
      },
    }),
    ...(embedding && { embedding_dim: num(embedding.shape?.[1]) ?? userKnows(`length of "${embedding.name}"`) }),
    // A graph exported without dynamic_axes fixes the batch at 1.
    batch: { max: fixedBatch ? 1 : 8 },
    graph: {
      inputs: Object.fromEntries(inputs.map((m) => [m.name, describeTensor(m)])),
      outputs: Object.fromEntries(outputs.map((m) => [m.name, describeTensor(m)])),
    },
    provenance: {
      trained: userKnows('true for trained weights (a boolean)'),
      method: userKnows('how the weights were made'),
      source: userKnows('where they come from'),
    },
  };
}

/** The TODO strings left in a manifest, as "field: TODO: what to give". */
export function todos(value: unknown, path = ''): string[] {
  if (typeof value === 'string') return value.startsWith(TODO) ? [`${path || '(root)'}: ${value}`] : [];
  if (Array.isArray(value)) return value.flatMap((v, i) => todos(v, `${path}.${i}`.replace(/^\./, '')));
  if (value && typeof value === 'object')
    return Object.entries(value).flatMap(([k, v]) => todos(v, path ? `${path}.${k}` : k));
  return [];
}
