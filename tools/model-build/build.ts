// `npm run models:build [dir]`: writes every shipped model package, deterministically.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildTissueSeg } from './tissue-seg.js';
import { buildGeneExpr } from './gene-expr.js';
import { buildTileEmbed } from './tile-embed.js';
import type { PackageBuild } from './package-build.js';

export function writePackage(root: string, build: PackageBuild): string {
  const dir = join(root, build.manifest.name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(build.manifest, null, 2) + '\n');
  writeFileSync(join(dir, 'model.onnx'), build.model.model);
  if (build.model.externalData)
    writeFileSync(join(dir, build.model.externalData.location), build.model.externalData.bytes);
  return dir;
}

export const shippedPackages = (): PackageBuild[] => [buildTissueSeg(), buildGeneExpr(), buildTileEmbed()];

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = process.argv[2] ?? 'models';
  for (const build of shippedPackages()) console.log(writePackage(root, build));
}
