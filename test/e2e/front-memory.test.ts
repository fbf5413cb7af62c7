// A front's memory is bounded by what it admits, not by what clients send: 14 MB bodies from 96
// clients at once against a model with a small queue. Requests that cannot be served are answered
// before their body is read, or at the chunk that would pass the front's byte budget; the front's
// RSS stays bounded and comes back after the load.
// And readiness from the first moment the port answers: never a 500, never a pressure 503. And a
// heap limit no front's heap can reach is said at start, once.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { copyPackage } from '../helpers/packages.js';
import { TILE_PROCESS_EXEC_ARGV } from '../../supervisor/v8-flags.js';

const BODY_MB = 14;
const CLIENTS = 96;

const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
const frontPid = (server: TestServer) =>
  server.lines.find((l) => /Server listening/.test(String(l.msg)))!.pid as number;

/** POSTs `body` and resolves with the status (0 when the connection failed). */
function post(url: string, body: Buffer, agent: Agent): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      `${url}/api/predict/gene-expr`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

/** A valid JSON tile body of `mb` MB whose image is not a PNG: admitted requests are read whole,
 *  then refused (422). */
const notPng = (mb: number) =>
  Buffer.from(
    JSON.stringify({
      image_data: 'A'.repeat(mb * 1024 * 1024),
      slide_name: 's',
      x: 0,
      y: 0,
      width: 224,
      height: 224,
      patch_idx: 0,
    }),
  );

t.test(
  `${CLIENTS} clients sending ${BODY_MB} MB bodies: admitted ones bounded, the rest 503 before their body`,
  async (t) => {
    const server = await startServer({
      models: [{ name: 'gene-expr', max_queue: 4 }],
      config: { body_limit_bytes: 16 * 1024 * 1024, front: { max_inflight_bytes: 64 * 1024 * 1024 } },
    });
    t.teardown(() => server.stop());
    const pid = frontPid(server);
    const before = rssMb(pid);
    const body = notPng(BODY_MB);
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 50);
    const statuses = await Promise.all(Array.from({ length: CLIENTS * 2 }, () => post(server.url, body, agent)));
    clearInterval(sampler);
    agent.destroy();
    const count = (s: number) => statuses.filter((x) => x === s).length;
    t.ok(count(503) > 0, `${count(503)} refused with 503, before their body was read or at the chunk past the budget`);
    // Bytes count as they arrive (a stalled upload holds only what it sent), so more uploads run at
    // once than the budget holds whole: on a slow host some pass front.body_timeout_ms (408).
    t.ok(
      statuses.every((s) => s === 422 || s === 503 || s === 408 || s === 0),
      `only 422 (admitted, read, refused), 503 and 408: ${[...new Set(statuses)].join(', ')}`,
    );
    // Unbounded, 192 bodies of 14 MB held at once is 2.7 GB of buffers alone.
    t.ok(peak - before < 900, `front RSS ${before.toFixed(0)} MB before, ${peak.toFixed(0)} MB at its peak`);
    await server.waitFor(() => rssMb(pid) - before < 400, 30000);
    t.pass(`memory came back: ${rssMb(pid).toFixed(0)} MB after the load`);
    // And the budget: four bodies at once, as many bytes as it holds, are admitted and read whole
    // (422: not a PNG), not refused as if the requests before them still held bytes.
    const quarter = notPng(15);
    const again = new Agent({ keepAlive: true, maxSockets: 4 });
    t.same(
      await Promise.all(Array.from({ length: 4 }, () => post(server.url, quarter, again))),
      [422, 422, 422, 422],
      'the budget is whole again',
    );
    again.destroy();
    t.equal(server.proc.exitCode, null);
  },
);

t.test(
  'readiness polled from the first moment the port answers: 503 or 200, never a 500; no pressure 503',
  async (t) => {
    // A model whose warm-up takes seconds, so the first answers come while it loads.
    const slow = copyPackage('gene-expr', (m) => (m.warmup = { iterations: 60 }));
    // The shipped event-loop-delay limit (the test helper turns it off).
    const server = await startServer({
      models: [{ name: 'gene-expr', path: slow }],
      config: { pressure: { max_event_loop_delay_ms: 1000 } },
      waitReady: false,
    });
    t.teardown(() => server.stop());
    const seen = new Map<number, number>();
    const pressured: string[] = [];
    let ready = false;
    const deadline = Date.now() + 60000;
    while (!ready && Date.now() < deadline) {
      const [health, model] = await Promise.all([
        server.get('/health/ready'),
        server.post('/api/embed/gene-expr', '{}'),
      ]);
      seen.set(health.status, (seen.get(health.status) ?? 0) + 1);
      const detail = String(((await model.json()) as Record<string, unknown>).detail ?? '');
      if (/under pressure/.test(detail)) pressured.push(detail);
      ready = health.status === 200;
    }
    t.same(
      [...seen.keys()].filter((s) => s !== 200 && s !== 503),
      [],
      'readiness only ever 503 or 200, never a 500',
    );
    t.same(pressured, [], 'no pressure 503 while starting');
    t.ok(ready, `ready; readiness answers seen: ${JSON.stringify(Object.fromEntries(seen))}`);
    t.ok((seen.get(503) ?? 0) > 0, 'polled while the model was still loading');
  },
);

t.test(
  "a max_heap_used_bytes above a front's V8 heap limit: one warning naming both, and the service serves",
  async (t) => {
    // A front's limit: node with the fronts' flags (the supervisor's own limit may differ).
    const limit = Number(
      execFileSync(process.execPath, [
        ...TILE_PROCESS_EXEC_ARGV,
        '-p',
        "require('node:v8').getHeapStatistics().heap_size_limit",
      ]),
    );
    const warnings = (server: TestServer) => server.lines.filter((l) => l.errorCode === 'TILE_ERR_CONFIG_HEAP_LIMIT');
    for (const value of [limit, limit + 1]) {
      const server = await startServer({
        models: [{ name: 'gene-expr' }],
        config: { fronts: 2, pressure: { max_heap_used_bytes: value } },
      });
      // Both fronts have started (each logs its listening line) before the warnings are counted.
      await server.waitFor(() => server.lines.filter((l) => /Server listening/.test(String(l.msg))).length === 2);
      const said = warnings(server);
      await server.stop();
      if (value === limit) {
        t.same(said, [], 'the limit itself: no warning');
        continue;
      }
      t.equal(said.length, 1, 'one warning, not one a front');
      t.match(said[0], {
        level: 40,
        setting: 'pressure.max_heap_used_bytes',
        value,
        heapSizeLimit: limit,
        msg: new RegExp(
          `: pressure\\.max_heap_used_bytes is ${value} \\(\\d+ MiB\\), above a front's V8 heap limit of ${limit} \\(\\d+ MiB\\): its heap never gets there, so it never sheds load; lower it, or raise the limit with NODE_OPTIONS=--max-old-space-size=<MiB>$`,
        ),
      });
      t.ok(String(said[0].msg).startsWith(`${server.dir}/config.json: `), 'it names the file');
    }
  },
);
