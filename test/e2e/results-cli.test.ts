// What tile-infer and the tools say before any work, as their commands run (issue 28): a slide
// named twice in a cohort, a --server with a path, `--help` of the package and synthetic-slide
// tools, --check-config with the port taken, and README's lines that make tile.png and tile.rgb.
import t from 'tap';
import { execFile } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ROOT, MODELS } from '../helpers/server.js';
import { tileInfer } from '../helpers/tile-infer.js';
import { cleanEnv } from '../../tools/service-process.js';
import { tempDir } from '../../tools/temp-dir.js';

const dir = tempDir('results-cli');

/** A command through sh (so that tap's hooks cannot put their loaders back into NODE_OPTIONS). */
function run(
  command: string,
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) =>
    execFile(
      '/bin/sh',
      ['-c', `unset NODE_OPTIONS; ${command}`],
      {
        cwd: ROOT,
        timeout: 60000,
        env: {
          ...Object.fromEntries(
            Object.entries(cleanEnv()).filter(([k]) => !['PORT', 'HOST', 'MODELS', 'CONFIG'].includes(k)),
          ),
          PATH: `${process.execPath.replace(/\/node$/, '')}:${process.env.PATH}`,
          ...env,
        },
        maxBuffer: 4 << 20,
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
}

// Every command at once (each is a Node start, seconds on a busy machine), checked below.
writeFileSync(join(dir, 'twice.csv'), 'wsi,mpp\na.svs,0.5\nb.svs,\na.svs,0.25\n');
const SERVERS = [
  ['http://127.0.0.1:1/prefix', /with no path, query, fragment or user/],
  ['http://127.0.0.1:1/?x=1', /with no path, query, fragment or user/],
  ['ftp://127.0.0.1:1', /ftp: is not http: or https:/],
  ['127.0.0.1:1', /(not a URL|is not http)/],
] as const;
const holder = createServer();
await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
const busy = (holder.address() as AddressInfo).port;
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({ model_repository: MODELS, port: busy, models: [{ name: 'tissue-seg', gpus: [] }] }),
);
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const tileLines = readme.split('\n').filter((l) => /^node -e .*> tile\.(png|rgb)$/.test(l));
const slideTool = join(ROOT, 'dist/tools/synthetic/slide.js');
const [rows, mixed, args, servers, pkg, slideHelp, slideWrong, check, made] = await Promise.all([
  tileInfer(['slide', join(dir, 'twice.csv'), '--model', 'm', '--out', join(dir, 'out')]),
  tileInfer(['slide', join(dir, 'b.svs'), join(dir, 'twice.csv'), '--model', 'm', '--out', join(dir, 'out')]),
  tileInfer(['slide', join(dir, 'b.svs'), join(dir, 'b.svs'), '--model', 'm', '--out', join(dir, 'out')]),
  Promise.all(
    SERVERS.map(([server]) =>
      tileInfer(['slide', join(dir, 'x.svs'), '--model', 'm', '--out', join(dir, 'out'), '--server', server]),
    ),
  ),
  run('node dist/tools/package/main.js --help'),
  run(`cd ${dir} && node ${slideTool} --help`),
  run(`cd ${dir} && node ${slideTool} notes.txt`),
  run('node dist/supervisor/main.js --check-config', { CONFIG: config }),
  Promise.all(tileLines.map((line) => run(line.replace(/> (tile\.\w+)$/, `> ${dir}/$1`)))),
]);
holder.close();

t.test(
  'a slide named twice (two manifest rows, a row and an argument, or two arguments) is refused naming both',
  async (t) => {
    t.equal(rows.code, 2, 'a usage error');
    t.match(
      rows.stderr,
      /^tile-infer: \[TILE_ERR_COHORT_DUPLICATE\] \S+\/a\.svs is named twice: \S+twice\.csv line 2 \(mpp 0\.5\) and \S+twice\.csv line 4 \(mpp 0\.25\); keep one\n$/,
    );
    t.match(
      mixed.stderr,
      /\[TILE_ERR_COHORT_DUPLICATE\] \S+\/b\.svs is named twice: input 1 on the command line \("\S+\/b\.svs"\) and \S+twice\.csv line 3/,
    );
    // Twice on the command line: which two inputs.
    t.match(
      args.stderr,
      /\[TILE_ERR_COHORT_DUPLICATE\] \S+\/b\.svs is named twice: input 1 on the command line \("\S+\/b\.svs"\) and input 2 on the command line \("\S+\/b\.svs"\); keep one/,
    );
  },
);

t.test('--server is a service root: a path, query or other scheme is a usage error (exit 2)', async (t) => {
  SERVERS.forEach(([server, why], k) => {
    t.equal(servers[k].code, 2, server);
    t.match(
      servers[k].stderr,
      new RegExp(`^tile-infer: \\[TILE_ERR_CLIENT_USAGE\\] --server ${server.replace(/[?.]/g, '\\$&')}: `),
      server,
    );
    t.match(servers[k].stderr, why);
  });
});

t.test('npm run package -- --help and the synthetic slide tool --help print usage, and write nothing', async (t) => {
  t.equal(pkg.code, 0);
  t.match(pkg.stdout, /^usage: npm run package -- <model\.onnx> --name <name>[\s\S]*--lint/);
  t.equal(slideHelp.code, 0);
  t.match(slideHelp.stdout, /^usage: node dist\/tools\/synthetic\/slide\.js OUT\.tif\|OUT\.svs/);
  t.throws(() => statSync(join(dir, '--help')), 'no file named --help');
  t.equal(slideWrong.code, 2, 'a name that is not .tif or .svs is refused');
});

t.test('--check-config reports a listen port in use', async (t) => {
  t.equal(check.code, 2, 'problems found');
  t.match(check.stdout, /config\.json: problems found\n/);
  t.match(
    check.stderr,
    new RegExp(
      `configuration error \\[TILE_ERR_LISTEN_PORT_IN_USE\\]: \\S+config\\.json: port is ${busy} on 127\\.0\\.0\\.1, which is already in use`,
    ),
  );
});

t.test("README's lines make tile.png (224x224 PNG) and tile.rgb (512x512 raw RGB)", async (t) => {
  t.equal(tileLines.length, 2, 'a line for each');
  made.forEach((r, k) => t.equal(r.code, 0, tileLines[k]));
  const png = readFileSync(join(dir, 'tile.png'));
  t.same([png.subarray(1, 4).toString(), png.readUInt32BE(16), png.readUInt32BE(20)], ['PNG', 224, 224]);
  t.equal(statSync(join(dir, 'tile.rgb')).size, 512 * 512 * 3);
});
