// What /docs shows of a model's routes: its tile size and MPP, what `output` holds (length,
// genes), and a request body that works when sent from the page (a flat H&E-pink tile of the
// model's size, a few hundred bytes as PNG).
import { PNG } from 'pngjs';
import type { Manifest, Task } from '../model-package/manifest.js';
import type { TileRequest } from '../contract/schemas.js';

export function describeRoute(name: string, manifest: Manifest | null, task: Task): string {
  if (!manifest) return `${name}: its manifest could not be read at start; GET /api/models says why.`;
  const { tile, genes } = manifest;
  const takes = `Takes ${tile.width}x${tile.height} px tiles at ${tile.mpp} MPP (±${Math.round(tile.mpp_tolerance * 100)}%).`;
  const untrained = manifest.provenance.trained ? '' : ' Weights NOT TRAINED: outputs carry no biological meaning.';
  if (task === 'segmentation') return `${takes} \`output\`: the tissue mask, ${tile.width * tile.height} values of 0 or 1 (row-major); \`tissue_ratio\` its tissue fraction unless sent.${untrained}`;
  if (task === 'embedding') return `${takes} \`output\`: the embedding, ${manifest.embedding_dim ?? '?'} values.${untrained}`;
  const outputs = genes ? `${genes.output.length} values, one per gene: ${genes.output.join(', ')}` : 'the prediction vector';
  const bulk = genes ? ` Optional \`bulk_rna\`: ${genes.input.length} counts, one per input gene (${genes.panel}: ${genes.input.join(', ')}), transformed with ${genes.bulk_transform}; omitted, zeros.` : '';
  return `${takes} \`output\`: ${outputs}.${bulk}${untrained}`;
}

const PINK = [232, 186, 214];

export function exampleRequest(manifest: Manifest | null): TileRequest | undefined {
  if (!manifest) return undefined;
  const { width, height, mpp } = manifest.tile;
  const png = new PNG({ width, height, colorType: 2 });
  for (let i = 0; i < width * height; i++) png.data.set([...PINK, 255], i * 4);
  const image = PNG.sync.write(png, { colorType: 2 });
  return { image_data: image.toString('base64'), slide_name: 'example-slide', x: 0, y: 0, width, height, patch_idx: 0, resolution: mpp };
}
