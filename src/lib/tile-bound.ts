/** Largest tile side. Pathology models take tiles of 224 to a few thousand px; a 16384 px tile is
 *  768 MiB of RGB and 3 GiB as float32 before any batching, so a larger side is a typo (or 1e308),
 *  and the worker's buffers and the /docs example are sized from it. Bounds a manifest's tile and
 *  so the config's max_tile_pixels. */
export const MAX_TILE_SIDE = 16384;
