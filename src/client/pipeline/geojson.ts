// The tissue mask as GeoJSON polygons in level-0 pixel coordinates, one Feature per tissue
// island (outer ring plus holes), with QuPath's annotation properties so File > Import objects
// brings them in as "Tissue" annotations.
import { contours } from 'd3-contour';
import type { TissueMask } from './tissue.js';

export type Ring = [number, number][];

export interface TissueFeature {
  type: 'Feature';
  geometry: { type: 'Polygon'; coordinates: Ring[] };
  properties: { objectType: 'annotation'; classification: { name: 'Tissue'; color: [number, number, number] } };
}

/** `scale`: level-0 pixels per mask pixel. */
export function tissueGeoJson(
  { mask, width, height }: TissueMask,
  scale: number,
): { type: 'FeatureCollection'; features: TissueFeature[] } {
  const values = Float64Array.from(mask);
  // Unsmoothed marching squares on the 0/1 grid: edges run through pixel-edge midpoints, so each
  // ring encloses exactly the mask's pixels (up to the cut corners).
  const [multi] = contours().size([width, height]).smooth(false).thresholds([0.5])(Array.from(values));
  const features: TissueFeature[] = multi.coordinates.map((polygon) => ({
    type: 'Feature',
    geometry: {
      type: 'Polygon',
      coordinates: polygon.map((ring) =>
        ring.map(([x, y]) => [Math.round(x * scale), Math.round(y * scale)] as [number, number]),
      ),
    },
    properties: { objectType: 'annotation', classification: { name: 'Tissue', color: [80, 160, 80] } },
  }));
  return { type: 'FeatureCollection', features };
}
