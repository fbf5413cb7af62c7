// Tile requests built from the synthetic tile generator.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cellularTile, encodePng } from '../../tools/synthetic/tissue.js';
import { ROOT } from './server.js';

export const FIXTURES = join(ROOT, 'test/fixtures');

export function cellularPng(seed: number, size = 224): Buffer {
  return encodePng(cellularTile(seed, size));
}

export function fixturePng(name: string): Buffer {
  return readFileSync(join(FIXTURES, 'tissue', `${name}.png`));
}

export function tileRequest(png: Buffer, fields: Record<string, unknown> = {}): Record<string, unknown> {
  const size = png.readUInt32BE(16);
  return {
    image_data: png.toString('base64'),
    slide_name: 'slide-001',
    x: 1024,
    y: 2048,
    width: size,
    height: png.readUInt32BE(20),
    patch_idx: 7,
    ...fields,
  };
}
