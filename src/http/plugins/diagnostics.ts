// GET /diagnostics: every probe, from the supervisor and from each worker over IPC, in one
// anonymized payload that is safe to paste into a bug report.
import { dirname } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { ServiceConfig } from '../../../supervisor/config.js';
import type { Supervisor } from '../../../supervisor/supervisor.js';
import { Anonymizer } from '../../diagnostics/anonymize.js';
import * as probes from '../../diagnostics/probes.js';
import { HTTPValidationError } from '../schemas/tile.js';
import { requireAdminToken } from '../admin-token.js';
import { sendValidationError } from './errors.js';

const CATEGORIES = ['usage', 'diagnostics'] as const;
const Query = Type.Object({
  categories: Type.Optional(Type.String({ description: "Comma-separated: 'usage' (recent model-request usage entries) and/or 'diagnostics' (the full payload under a 'diagnostics' key). Omitted: the full payload at the top level." })),
});

export interface DiagnosticsOptions {
  supervisor: Supervisor;
  config: ServiceConfig;
}

export default async function diagnostics(app: FastifyInstance, { supervisor, config }: DiagnosticsOptions): Promise<void> {
  const root = new URL('../../../../', import.meta.url).pathname;
  const anonymizer = new Anonymizer({
    installPaths: [root, process.cwd(), config.model_repository, config.data_dir, ...(config.log_file ? [dirname(config.log_file)] : [])],
    slideNames: () => app.recentSlides,
    publicNames: config.models.map((m) => m.name),
  });
  const timeout = config.supervisor.probe_timeout_ms;
  const folders = {
    models: config.model_repository,
    data: config.data_dir,
    ...(config.log_file && { logs: dirname(config.log_file) }),
  };

  async function payload() {
    const [versions, host, gpus, disk, models, workers, serviceLog] = await Promise.all([
      probes.runProbe(probes.versions, timeout),
      probes.runProbe(probes.host, timeout),
      probes.runProbe(probes.gpus, timeout),
      probes.runProbe(() => probes.disk(folders), timeout),
      probes.runProbe(() => probes.models(supervisor), timeout),
      // Worker probes carry their own timeout; the section's is a little longer.
      probes.runProbe(() => probes.workers(supervisor, timeout), timeout + 500),
      probes.runProbe(() => probes.tail(config.log_file), timeout),
    ]);
    return {
      generated_at: new Date().toISOString(),
      versions,
      host,
      gpus,
      disk,
      models,
      workers,
      logs: {
        service: serviceLog,
        // Worker output is part of the server log; empty when no log file is configured.
        workers: config.log_file ? Object.fromEntries(supervisor.workers.map((w) => [w.id, w.tail.slice(-50)])) : {},
      },
      usage_summary: await probes.runProbe(() => app.usage.summary(), timeout),
    };
  }

  app.get(
    '/diagnostics',
    {
      schema: {
        tags: ['Diagnostics'],
        summary: 'Anonymized diagnostics and usage',
        querystring: Query,
        response: { 422: HTTPValidationError },
      },
      preHandler: requireAdminToken(config.admin_token),
    },
    async (request, reply) => {
      const raw = (request.query as { categories?: string }).categories;
      const wanted = raw === undefined ? [] : raw.split(',').map((s) => s.trim());
      const unknown = wanted.filter((c) => !(CATEGORIES as readonly string[]).includes(c));
      if (unknown.length) {
        return sendValidationError(reply, [{ loc: ['query', 'categories'], msg: "Input should be 'usage' or 'diagnostics' (comma-separated)", type: 'literal_error', ctx: { expected: "'usage' or 'diagnostics'" }, input: raw }]);
      }
      if (wanted.length === 0) return anonymizer.scrub(await payload());
      const body: Record<string, unknown> = {};
      if (wanted.includes('diagnostics')) body.diagnostics = await payload();
      if (wanted.includes('usage')) body.usage = app.usage.recent();
      return anonymizer.scrub(body);
    },
  );
}
