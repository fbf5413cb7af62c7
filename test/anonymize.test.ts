import t from 'tap';
import { hostname, homedir } from 'node:os';
import { Anonymizer } from '../src/diagnostics/anonymize.js';

t.test('scrubs planted values and keeps the rest', async (t) => {
  const slides = new Set(['TCGA-A1-A0SB-01Z']);
  const a = new Anonymizer({ env: { API_KEY: 'sk-live-abcdef123', SHORT: 'abc', PORT: '8000', NODE_VERSION: '20.20.2' }, installPaths: ['/opt/tile-service/'], slideNames: () => slides });
  const line = `host ${hostname()} home ${homedir()}/x key sk-live-abcdef123 at /opt/tile-service/models from 10.1.2.3 and fe80::1ff:fe23:4567:890a mac 00:1a:2b:3c:4d:5e slide TCGA-A1-A0SB-01Z on 127.0.0.1 port 8000 node 20.20.2 at 12:34:56 in onnxruntime::Provider`;
  const out = a.scrubString(line);
  for (const secret of [hostname(), 'sk-live-abcdef123', '/opt/tile-service', '10.1.2.3', 'fe80::1ff:fe23:4567:890a', '00:1a:2b:3c:4d:5e', 'TCGA-A1-A0SB-01Z']) t.notOk(out.includes(secret), `${secret} removed`);
  t.match(out, /<host>/);
  t.match(out, /<env:API_KEY>/);
  t.match(out, /<install>\/models/);
  t.match(out, /<ip> and <ip> mac <mac> slide <slide> on 127\.0\.0\.1 port 8000 node 20\.20\.2 at 12:34:56 in onnxruntime::Provider$/);
  t.same(a.scrub({ [`k ${hostname()}`]: [`${homedir()}`, 3, null] }), { 'k <host>': [homedir().length >= 2 ? '<home>' : homedir(), 3, null] });
});
