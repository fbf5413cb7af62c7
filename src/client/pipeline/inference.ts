// Tiles through a model: the endpoint a model's tasks call for, the tiles posted with a bounded
// number in flight (results journalled as they arrive), and the CLAM/TRIDENT-style outputs.
import { join } from 'node:path';
import type { ModelMetadataBody, TileClient } from '../tile-client.js';
import { TileClientError } from '../tile-client-error.js';
import type { MadeBody } from '../tile-body.js';
import { Semaphore } from '../semaphore.js';
import { UsageError } from '../usage-error.js';
import type { Journal, JournalShape } from './journal.js';
import { makeDir, predictionsCsv, writeFileAtomic, writeH5, type H5Attrs } from './outputs.js';

export interface ModelPlan {
  /** Endpoint path with query. */
  path: string;
  embedding: boolean;
  prediction: boolean;
  /** The package digest of the model the run asked for: every answer must come from it. */
  sha256: string;
}

/** Embedding models go to /api/embed; prediction models to /api/predict, with the embedding of
 *  the same forward pass when the model has one. */
export function modelPlan(meta: ModelMetadataBody): ModelPlan {
  const model = encodeURIComponent(meta.model);
  const prediction = meta.tasks.includes('prediction');
  const embedding = meta.tasks.includes('embedding');
  const { sha256 } = meta;
  if (prediction)
    return {
      path: `/api/predict/${model}${embedding ? '?mode=prediction_with_embedding' : ''}`,
      prediction,
      embedding,
      sha256,
    };
  if (embedding) return { path: `/api/embed/${model}`, prediction, embedding, sha256 };
  throw new UsageError(
    'TILE_ERR_CLIENT_MODEL_TASKS',
    `model ${meta.model} serves ${meta.tasks.join(', ')}: neither embeddings nor predictions (a segmentation model goes in --tissue-model)`,
  );
}

/** A tile to post: its patch_idx, the level-0 (or tile plan) coordinates of its top-left corner,
 *  and its tissue fraction where a grid found it. */
export interface TileAt {
  idx: number;
  x: number;
  y: number;
  tissue?: number;
}

/** A tile and its request body, made ahead of the posting; `release` gives the body's buffer back
 *  for another tile's once the request is done. */
export interface TileWithBody<T extends TileAt = TileAt> {
  tile: T;
  body: MadeBody;
  release?: () => void;
}

export interface Progress {
  tick(): void;
}

/** What a tile's 4xx answer does: 'stop' fails the run, 'skip' records the tile as failed and
 *  goes on (a folder of tiles with a damaged file). */
export type OnTileError = (tile: TileAt, err: TileClientError) => 'stop' | 'skip';

/** A model's tiles to post, and where their results go. */
export interface TilePosting {
  client: TileClient;
  plan: ModelPlan;
  /** The tiles' bodies, as they are made. */
  bodies: AsyncIterable<TileWithBody>;
  journal: Journal;
  /** Tiles in flight at once. */
  concurrency: number;
  progress?: Progress;
  onTileError?: OnTileError;
}

/** Posts every tile body as it comes, at most `concurrency` at a time, journalling results as they
 *  arrive. The first failure stops new tiles and is thrown once those in flight have settled
 *  (their results are journalled), unless onTileError skips it. */
export async function runTiles({
  client,
  plan,
  bodies,
  journal,
  concurrency,
  progress,
  onTileError,
}: TilePosting): Promise<void> {
  const slots = new Semaphore(concurrency);
  const running = new Set<Promise<void>>();
  let failure: unknown = null;
  try {
    for await (const { tile, body, release: done } of bodies) {
      const release = await slots.acquire();
      if (failure) {
        release();
        break;
      }
      const job = (async () => {
        try {
          const res = await client.infer(plan.path, body);
          // Answers of another version would go into this plan's outputs, labelled as its model: a
          // second --server with another version, or the model changed mid-run (an attack session:
          // 196 rows of one version and 140 of another in one file, exit 0).
          if (res.modelSha256 !== null && res.modelSha256 !== plan.sha256)
            throw new TileClientError(
              'TILE_ERR_CLIENT_MODEL_CHANGED',
              `${plan.path}: tile ${tile.idx} was answered by model sha256 ${res.modelSha256}, the run's is ${plan.sha256} (GET /api/metadata at the start): a --server with another version, or the model changed during the run; rerun once every server serves one version`,
            );
          journal.append({
            idx: tile.idx,
            output: res.output,
            ...(plan.prediction && plan.embedding ? { embedding: res.embedding } : {}),
          });
          progress?.tick();
        } catch (err) {
          if (
            err instanceof TileClientError &&
            err.code === 'TILE_ERR_CLIENT_HTTP' &&
            onTileError?.(tile, err) === 'skip'
          )
            return;
          failure ??= err;
        } finally {
          done?.();
          release();
        }
      })();
      running.add(job);
      void job.then(() => running.delete(job));
    }
  } catch (err) {
    failure ??= err;
  }
  await Promise.all(running);
  if (failure) throw failure;
}

/** The lengths of a model's results, for the journal's checks: a prediction per output gene, an
 *  embedding of embedding_dim. */
export function journalShape(meta: ModelMetadataBody, plan: ModelPlan, tiles: number): JournalShape {
  const genes = meta.output_genes?.length || undefined;
  const dim = meta.embedding_dim ?? undefined;
  const withEmbedding = plan.prediction && plan.embedding;
  return { tiles, withEmbedding, output: plan.prediction ? genes : dim, embedding: withEmbedding ? dim : undefined };
}

/** A model's results for the tiles of one slide (or folder of tiles), to write. */
export interface ModelOutputs {
  outDir: string;
  /** The slide's (or folder's) name: the files' stem. */
  stem: string;
  model: ModelMetadataBody;
  plan: ModelPlan;
  /** The tiles whose results are written, one row each in this order. */
  tiles: TileAt[];
  journal: Journal;
  /** HDF5 attributes of the files and of their coords. */
  attrs: H5Attrs;
}

/** features_<model>/<stem>.h5 (embeddings) and predictions_<model>/<stem>.h5 + .csv, rows in
 *  patch_idx order. */
export async function writeModelOutputs({
  outDir,
  stem,
  model: meta,
  plan,
  tiles,
  journal,
  attrs,
}: ModelOutputs): Promise<string[]> {
  const n = tiles.length;
  const coords = new Int32Array(n * 2);
  tiles.forEach((t, k) => coords.set([t.x, t.y], k * 2));
  const rootAttrs: H5Attrs = { model: meta.model, model_version: meta.version, model_sha256: meta.sha256, ...attrs };
  const coordsAttrs: H5Attrs = { name: stem, ...attrs };
  const written: string[] = [];
  const rows = (pick: (r: { output: number[]; embedding?: number[] | null }) => number[], dim: number) => {
    const out = new Float32Array(n * dim);
    tiles.forEach((t, k) => out.set(pick(journal.done.get(t.idx)!), k * dim));
    return out;
  };
  if (plan.embedding) {
    const dim = meta.embedding_dim ?? journal.done.get(tiles[0]?.idx)?.output.length ?? 0;
    const dir = join(outDir, `features_${meta.model}`);
    makeDir(dir);
    const features = rows((r) => (plan.prediction ? r.embedding! : r.output), dim);
    const path = join(dir, `${stem}.h5`);
    await writeH5(
      path,
      [
        { name: 'features', data: features, shape: [n, dim] },
        { name: 'coords', data: coords, shape: [n, 2], attrs: coordsAttrs },
      ],
      rootAttrs,
    );
    written.push(path);
  }
  if (plan.prediction) {
    const genes = meta.output_genes ?? [];
    const dim = genes.length || (journal.done.get(tiles[0]?.idx)?.output.length ?? 0);
    const dir = join(outDir, `predictions_${meta.model}`);
    makeDir(dir);
    const predictions = rows((r) => r.output, dim);
    const h5 = join(dir, `${stem}.h5`);
    await writeH5(
      h5,
      [
        { name: 'predictions', data: predictions, shape: [n, dim] },
        { name: 'coords', data: coords, shape: [n, 2], attrs: coordsAttrs },
        { name: 'genes', data: genes, shape: [genes.length] },
      ],
      rootAttrs,
    );
    const csv = join(dir, `${stem}.csv`);
    writeFileAtomic(
      csv,
      predictionsCsv(
        // A model that names no genes (a classifier's scores) still gets a column per value: the
        // header had named only patch_idx, x and y over rows of more (an attack session).
        genes.length ? genes : Array.from({ length: dim }, (_, i) => `output_${i}`),
        tiles.map((t, k) => ({ idx: t.idx, x: t.x, y: t.y, values: predictions.subarray(k * dim, (k + 1) * dim) })),
      ),
    );
    written.push(h5, csv);
  }
  return written;
}
