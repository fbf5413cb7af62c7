// `npm run package -- model.onnx --name my-vit [facts]`: an export becomes a package folder
// (model.onnx, its external-data files, a manifest skeleton), then the lint runs on it.
// `npm run package -- --lint models/*`: the lint alone, on existing packages.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import ort from '../../src/lib/onnxruntime.js';
import onnxProto from 'onnx-proto';
import type { Task } from '../../src/model-package/manifest.js';
import { lintPackage, type LintReport } from './lint.js';
import { manifestSkeleton, type KnownFacts } from './skeleton.js';

const USAGE = `usage: npm run package -- <model.onnx> --name <name> [--out models] [--task embedding,prediction,segmentation]
         [--mpp 0.5] [--channel-order RGB|BGR] [--scale 0.00392156862745098] [--mean r,g,b] [--std r,g,b] [--force]
       npm run package -- --lint <package folder>...`;

/** Files the graph keeps its weights in (ONNX external data), relative to model.onnx. */
function externalDataFiles(model: Uint8Array): string[] {
  const { graph } = onnxProto.onnx.ModelProto.decode(model);
  const locations = (graph?.initializer ?? []).flatMap((t) =>
    (t.externalData ?? []).filter((e) => e.key === 'location').map((e) => e.value!),
  );
  return [...new Set(locations)];
}

const triple = (s: string | undefined, flag: string): [number, number, number] | undefined => {
  if (s === undefined) return undefined;
  const v = s.split(',').map(Number);
  if (v.length !== 3 || v.some((x) => !Number.isFinite(x)))
    throw new Error(`--${flag}: three numbers r,g,b, in R, G, B order`);
  return v as [number, number, number];
};
const number = (s: string | undefined, flag: string) => {
  if (s === undefined) return undefined;
  const v = Number(s);
  if (!Number.isFinite(v)) throw new Error(`--${flag}: a number`);
  return v;
};

export async function packageExport(modelPath: string, out: string, facts: KnownFacts, force = false): Promise<string> {
  const dir = join(out, facts.name);
  if (existsSync(join(dir, 'manifest.json')) && !force)
    throw new Error(`${dir}/manifest.json exists; --force replaces it`);
  const session = await ort.InferenceSession.create(modelPath);
  const manifest = manifestSkeleton(session, facts);
  await session.release();
  mkdirSync(dir, { recursive: true });
  const model = readFileSync(modelPath);
  writeFileSync(join(dir, 'model.onnx'), model);
  for (const file of externalDataFiles(model)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    copyFileSync(join(dirname(modelPath), file), join(dir, file));
  }
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  return dir;
}

function print(report: LintReport): void {
  if (!report.problems.length) console.log(`${report.dir}: ok`);
  for (const line of report.problems) console.log(line);
  for (const line of report.notes) console.log(`${report.dir}: note: ${line}`);
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      lint: { type: 'boolean' },
      name: { type: 'string' },
      out: { type: 'string', default: 'models' },
      task: { type: 'string' },
      mpp: { type: 'string' },
      'channel-order': { type: 'string' },
      scale: { type: 'string' },
      mean: { type: 'string' },
      std: { type: 'string' },
      force: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(
      `${USAGE}\n\nWrites models/<name>/ (manifest.json beside the graph) from an ONNX file and what you\nknow of it, then checks it; --lint checks package folders. Exit status: 0 ok, 1 problems\nfound, 2 a wrong command line.`,
    );
    return 0;
  }
  let dirs = positionals;
  if (!values.lint) {
    if (positionals.length !== 1 || !values.name) throw new Error(USAGE);
    const order = values['channel-order'];
    if (order !== undefined && order !== 'RGB' && order !== 'BGR') throw new Error('--channel-order: "RGB" or "BGR"');
    const facts: KnownFacts = {
      name: values.name,
      tasks: values.task?.split(',') as Task[] | undefined,
      mpp: number(values.mpp, 'mpp'),
      channelOrder: order,
      scale: number(values.scale, 'scale'),
      mean: triple(values.mean, 'mean'),
      std: triple(values.std, 'std'),
    };
    const dir = await packageExport(positionals[0], values.out!, facts, values.force);
    console.log(
      `${dir}: written from ${basename(positionals[0])}; review manifest.json, then add {"name": "${values.name}"} to the config's models`,
    );
    dirs = [dir];
  }
  if (!dirs.length) throw new Error(USAGE);
  let failed = 0;
  for (const dir of dirs) {
    const report = await lintPackage(dir);
    print(report);
    if (report.problems.length) failed++;
  }
  return failed ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: Error) => {
      console.error(err.message);
      process.exit(2);
    },
  );
}
