// The command line of `npm start` / `node dist/supervisor/main.js`: --help, --check-config, and
// the checks a start must pass before any worker forks. Every refusal is one line on stderr,
// "configuration error [CODE]: ...", and exit status ExitCode.CONFIG.
import { parseArgs } from 'node:util';
import { ConfigError, configFile, loadConfig, type ServiceConfig } from '../src/config/config.js';
import { CodedError } from '../src/lib/errors.js';
import { ExitCode } from '../src/lib/exit-codes.js';
import { checkListenAddress, checkPaths } from './preflight.js';
import { checkGpus } from './gpus.js';
import { describeProviders } from './provider-check.js';
import { PackageError, readPackage } from '../src/model-package/model-package.js';
import { checkGraph } from '../src/model-package/graph-check.js';
import { endpointsFor } from '../src/contract/endpoints.js';

const USAGE = `Usage: node dist/supervisor/main.js [--check-config | --help]   (npm start [-- --check-config])

Serves the tile inference API with one worker process per model instance.

Options:
  --check-config  Check the configuration, every enabled model package (its manifest, and its
                  model.onnx loaded by ONNX Runtime on the CPU and checked against the
                  manifest), the execution providers (CUDA provider libraries of the bundled
                  ONNX Runtime version, Vulkan devices), the listen address (HOST resolves,
                  PORT is free), the GPUs models list (where nvidia-smi runs)
                  and that LOG_FILE and DATA_DIR can be written, print what
                  would be served, and exit:
                  0 when all is well, 2 otherwise.
  --help, -h      Print this help and exit.

Environment:
  CONFIG       Configuration file (default config/default.json)
  PORT, HOST   Listen address (override the file's port and host)
  MODELS       Comma-separated models to enable, out of the file's models
  LOG_LEVEL    fatal, error, warn, info (default), debug, trace or silent
  LOG_FILE     Also write the log to this file (reopened on SIGUSR2, for logrotate)
  DATA_DIR     Usage log folder
  ADMIN_TOKEN  Bearer token required by /diagnostics and /metrics

Signals: SIGTERM/SIGINT stop after requests in flight; SIGHUP reloads model packages one worker
at a time; SIGUSR2 reopens LOG_FILE.
Exit status: 0 stopped cleanly; 2 configuration or environment refused before start.`;

const refusal = (err: Pick<CodedError, 'code' | 'message'>) => `configuration error [${err.code}]: ${err.message}\n`;

function refuse(err: ConfigError): never {
  process.stderr.write(refusal(err));
  process.exit(ExitCode.CONFIG);
}

/** What each enabled model would serve, read from its package and its graph loaded as a worker
 *  would (on the CPU); problems (a PackageError's code, and its message after the model's name)
 *  come back apart. */
export async function describeService(
  config: ServiceConfig,
): Promise<{ lines: string[]; problems: Pick<CodedError, 'code' | 'message'>[] }> {
  const lines = [`listening on http://${config.host}:${config.port}, ${config.models.length} model(s):`];
  const problems: Pick<CodedError, 'code' | 'message'>[] = [];
  for (const model of config.models) {
    try {
      const pkg = readPackage(model.path!, { folder: config.data_dir, readOnly: true });
      await checkGraph(pkg);
      const { manifest, sha256 } = pkg;
      const endpoints = endpointsFor(model.name, manifest.tasks).filter((e) => e.startsWith('POST'));
      const { width, height, mpp } = manifest.tile;
      lines.push(
        `  ${model.name} ${manifest.version}: ${manifest.tasks.join(', ')}; ${width}x${height} at ${mpp} MPP; ${model.instances} instance(s), gpus ${JSON.stringify(model.gpus)}; sha256 ${sha256.slice(0, 12)}; ${endpoints.join(', ')}`,
      );
    } catch (err) {
      if (!(err instanceof PackageError || (err instanceof CodedError && err.code === 'TILE_ERR_MODEL_LOAD')))
        throw err;
      problems.push({ code: err.code, message: `model ${model.name}: ${err.message}` });
    }
  }
  return { lines, problems };
}

/**
 * Handles the command line and returns the configuration to serve, or exits: after --help or
 * --check-config, or with one line when the configuration or the listen address is wrong.
 */
export async function prepareStart(argv = process.argv.slice(2), env = process.env): Promise<ServiceConfig> {
  let options: { help?: boolean; 'check-config'?: boolean };
  try {
    options = parseArgs({
      args: argv,
      options: { help: { type: 'boolean', short: 'h' }, 'check-config': { type: 'boolean' } },
    }).values;
  } catch (err) {
    refuse(
      new ConfigError(
        'TILE_ERR_CONFIG_ARGS',
        `${(err as Error).message.split('\n')[0]}, expected --check-config or --help`,
      ),
    );
  }
  if (options.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(ExitCode.OK);
  }
  let config: ServiceConfig;
  try {
    config = loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) refuse(err);
    throw err;
  }
  if (options['check-config']) {
    const service = await describeService(config);
    const providers = describeProviders(config);
    const gpus = await checkGpus(config, env);
    const lines = [...service.lines, ...providers.lines, ...gpus.lines];
    const listen = await checkListenAddress(config, env).then(
      () => [],
      (err) => (err instanceof ConfigError ? [err] : Promise.reject(err)),
    );
    const problems = [
      ...service.problems,
      ...providers.problems,
      ...gpus.problems,
      ...listen,
      ...checkPaths(config, env),
    ];
    process.stdout.write(`${configFile(env)}: ${problems.length ? 'problems found' : 'ok'}\n${lines.join('\n')}\n`);
    for (const problem of problems) process.stderr.write(refusal(problem));
    process.exit(problems.length ? ExitCode.CONFIG : ExitCode.OK);
  }
  await checkListenAddress(config, env).catch((err) =>
    err instanceof ConfigError ? refuse(err) : Promise.reject(err),
  );
  const [path] = checkPaths(config, env);
  if (path) refuse(path);
  return config;
}
