import t from 'tap';
import { hostname, homedir } from 'node:os';
import { Anonymizer } from '../../supervisor/diagnostics/anonymize.js';

t.test('scrubs planted values and keeps the rest', async (t) => {
  const slides = new Set(['TCGA-A1-A0SB-01Z']);
  const a = new Anonymizer({
    env: { API_KEY: 'sk-live-abcdef123', SHORT: 'abc', PORT: '8000', NODE_VERSION: '20.20.2' },
    installPaths: ['/opt/tile-service/'],
    slideNames: () => slides,
  });
  const line = `host ${hostname()} home ${homedir()}/x key sk-live-abcdef123 at /opt/tile-service/models from 10.1.2.3 and fe80::1ff:fe23:4567:890a mac 00:1a:2b:3c:4d:5e slide TCGA-A1-A0SB-01Z on 127.0.0.1 port 8000 node 20.20.2 at 12:34:56 in onnxruntime::Provider`;
  const out = a.scrubString(line);
  for (const secret of [
    hostname(),
    'sk-live-abcdef123',
    '/opt/tile-service',
    '10.1.2.3',
    'fe80::1ff:fe23:4567:890a',
    '00:1a:2b:3c:4d:5e',
    'TCGA-A1-A0SB-01Z',
  ])
    t.notOk(out.includes(secret), `${secret} removed`);
  t.match(out, /<host>/);
  t.match(out, /<env:API_KEY>/);
  t.match(out, /<install>\/models/);
  t.match(
    out,
    /<ip> and <ip> mac <mac> slide <slide> on 127\.0\.0\.1 port 8000 node 20\.20\.2 at 12:34:56 in onnxruntime::Provider$/,
  );
  t.same(a.scrub({ [`k ${hostname()}`]: [`${homedir()}`, 3, null] }), {
    'k <host>': [homedir().length >= 2 ? '<home>' : homedir(), 3, null],
  });
});

t.test(
  'free text only: keys, states, model names and numbers survive whatever the client and the environment hold',
  async (t) => {
    const slides = new Set(['gene', 'ready', 'pid', 'tissue-seg', '8000', 'PATIENT-7']);
    const a = new Anonymizer({
      env: {
        MODELS: 'tissue-seg,gene-expr',
        NODE_ENV: 'production',
        CONFIG: '/etc/tile/config.json',
        SENTRY_DSN: 'https://abc123@sentry.example/4',
        RANDOM: 'Zx81bQ0vLw3RkT9mPq2sYh',
      },
      slideNames: () => slides,
      publicNames: ['tissue-seg', 'gene-expr'],
    });
    const payload = {
      models: { 'tissue-seg': { state: 'ready', pid: 8000 }, 'gene-expr': { state: 'loading' } },
      workers: [{ id: 'gene-expr#0', state: 'ready', pid: 8000, provider: 'cpu' }],
      usage: [{ model: 'gene-expr', endpoint: 'predict', tile: '224x224' }],
      logs: [
        '{"level":30,"msg":"tile failed","model":"gene-expr","port":8000,"slide":"PATIENT-7"}',
        'gene-expr#0 stderr loading slide gene at port 8000 from genes.txt for PATIENT-7/tile.png',
        'dsn https://abc123@sentry.example/4 token Zx81bQ0vLw3RkT9mPq2sYh config /etc/tile/config.json',
      ],
    };
    const out = a.scrub(payload);
    t.same(out.models, payload.models, 'model names as keys, states and numbers untouched');
    t.same(out.workers, payload.workers, 'worker ids and states untouched');
    t.same(out.usage, payload.usage, 'usage entries untouched');
    t.equal(
      out.logs[0],
      '{"level":30,"msg":"tile failed","model":"gene-expr","port":8000,"slide":"<slide>"}',
      'a slide as a whole token of a log line is scrubbed, nothing else',
    );
    t.equal(
      out.logs[1],
      'gene-expr#0 stderr loading slide <slide> at port 8000 from genes.txt for <slide>/tile.png',
      'slide "gene" only where it is a whole token',
    );
    t.equal(
      out.logs[2],
      'dsn <env:SENTRY_DSN> token <env:RANDOM> config /etc/tile/config.json',
      'credential-shaped values scrubbed; MODELS, NODE_ENV and a config path are not secrets',
    );
  },
);
