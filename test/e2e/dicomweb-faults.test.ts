// The DICOMweb reader against a real Orthanc (its DICOMweb plugin) serving OrthancWSIDicomizer's
// output, through a proxy that misbehaves as servers and the gateways before them do: metadata that
// is a JSON object, a study search answered with a login page, frames cut mid-body, frames of
// garbage, a server that stops answering (before its headers, or mid-body), and metadata or frames
// whose body pours on without end. Each fails coded, naming the URL, or is retried and read.
import { once } from 'node:events';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { get, METADATA_LIMIT, seriesInstances } from '../../src/client/slide/dicom/dicomweb.js';
import { expandStudy } from '../../src/client/slide/dicom/open-dicom.js';
import { openSlide } from '../../src/client/slide/open.js';
import { writeSlide } from '../../tools/synthetic/slide.js';
import { dicomize, startOrthanc, uidsOf, type Orthanc } from '../../tools/orthanc.js';
import { tempDir } from '../../tools/temp-dir.js';
import { pour } from '../helpers/misbehaving-server.js';

const dir = tempDir('dicomweb-faults');
type Fault =
  | 'meta-object'
  | 'study-html'
  | 'frames-cut'
  | 'frames-garbage'
  | 'stall'
  | 'stall-body'
  | 'meta-endless'
  | 'frames-endless';
/** The fault the proxy plays, on how many more requests it applies to (Infinity: all). */
let fault: { kind: Fault; times: number } | null = null;

let orthanc: Orthanc;
let proxy: ReturnType<typeof createServer>;
let series = '';
let study = '';
let direct = '';

/** Answers as Orthanc does, but for the fault set, on the requests it applies to. */
function misbehave(upstream: string) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? '';
    const applies = (kind: Fault, on: boolean) => {
      if (!on || fault?.kind !== kind || fault.times <= 0) return false;
      fault.times--;
      return true;
    };
    const frames = url.includes('/frames/');
    if (applies('meta-object', url.endsWith('/metadata'))) {
      res.writeHead(200, { 'content-type': 'application/dicom+json' });
      return res.end('{"error":"no such series"}');
    }
    if (applies('study-html', url.includes('/series?'))) {
      res.writeHead(200, { 'content-type': 'text/html' });
      return res.end('<html>login</html>');
    }
    if (applies('stall', frames)) return; // never answers
    if (applies('meta-endless', url.endsWith('/metadata')) || applies('frames-endless', frames))
      // Past the metadata's limit (256 MiB) before it is cut.
      return pour(
        res,
        frames ? 'multipart/related; type="image/jpeg"; boundary=endless' : 'application/dicom+json',
        320,
      );
    const [cut, garbage, stallBody] = [
      applies('frames-cut', frames),
      applies('frames-garbage', frames),
      applies('stall-body', frames),
    ];
    const up = request(`${upstream}${url}`, { headers: req.headers }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (c: Buffer) => chunks.push(c));
      answer.on('end', () => {
        let body = Buffer.concat(chunks);
        const headers = { ...answer.headers, 'content-length': String(body.length) };
        delete headers['transfer-encoding'];
        res.writeHead(answer.statusCode ?? 502, headers);
        if (cut || stallBody) {
          res.write(body.subarray(0, body.length >> 1));
          // Cut: the connection dropped mid-body; stalled: left open, nothing more sent.
          if (cut) setTimeout(() => res.socket?.destroy(), 20);
          return;
        }
        // Each JPEG (SOI to EOI) overwritten, the multipart framing kept.
        if (garbage)
          body = Buffer.from(
            body.toString('latin1').replace(/\xff\xd8[\s\S]*?\xff\xd9/g, (m) => 'Z'.repeat(m.length)),
            'latin1',
          );
        res.end(body);
      });
    });
    up.on('error', () => req.socket.destroy());
    req.pipe(up);
  };
}

t.before(async () => {
  const tiff = join(dir, 's.tif');
  await writeSlide(tiff, {
    widthUm: 800,
    heightUm: 600,
    mpp: 0.5,
    seed: 8,
    format: 'tiff',
    islands: [{ cx: 400, cy: 300, rx: 300, ry: 200 }],
  });
  const folder = join(dir, 'dicom');
  await dicomize(tiff, folder, [0.6, 0.8], ['--max-size', '0']);
  orthanc = await startOrthanc();
  const files = readdirSync(folder).map((f) => join(folder, f));
  await orthanc.upload(files);
  const uids = await uidsOf(files[0]);
  proxy = createServer(misbehave(orthanc.url)).listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  const base = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/dicom-web`;
  study = `${base}/studies/${uids.study}`;
  series = `${study}/series/${uids.series}`;
  direct = `${orthanc.dicomWeb}/studies/${uids.study}/series/${uids.series}`;
});
t.afterEach(() => {
  fault = null;
});
t.teardown(async () => {
  proxy?.closeAllConnections();
  proxy?.close();
  await orthanc?.stop();
});

const region = async (url: string) => {
  const slide = await openSlide(url);
  try {
    return Buffer.from(await slide.readRegion(0, 0, 0, 512, 512));
  } finally {
    await slide.close();
  }
};

t.test('metadata that is not an array of data sets, and a study search answered with HTML', async (t) => {
  fault = { kind: 'meta-object', times: Infinity };
  await t.rejects(openSlide(series), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: `${series}/metadata: answered application/dicom+json: a JSON object, expected DICOM JSON's array of data sets`,
  });
  fault = { kind: 'study-html', times: Infinity };
  await t.rejects(expandStudy(study), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: new RegExp(
      `^${study.replace(/[.?]/g, '\\$&')}/series\\?Modality=SM: answered text/html: not DICOM JSON \\(Unexpected token`,
    ),
  });
});

t.test('frames cut mid-body are fetched again; cut every time, the series fails naming the URL', async (t) => {
  const want = await region(direct);
  fault = { kind: 'frames-cut', times: 1 };
  t.ok((await region(series)).equals(want), 'cut once: retried, the same pixels');
  t.equal(fault.times, 0, 'the cut was played');
  fault = { kind: 'frames-cut', times: Infinity };
  await t.rejects(region(series), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_DOWN',
    message: new RegExp(
      `^${series}/instances/[0-9.]+/frames/[0-9,]+: the DICOMweb server did not answer after 5 tries \\(its body cut short: `,
    ),
  });
});

t.test('frames that are not JPEG fail coded, naming the series and the level', async (t) => {
  fault = { kind: 'frames-garbage', times: Infinity };
  await t.rejects(region(series), {
    code: 'TILE_ERR_SLIDE_UNREADABLE',
    message: new RegExp(`^${series}: level 0: `),
  });
});

t.test('a server that stops answering, before its headers or mid-body: timed out and retried', async (t) => {
  const timeouts = { headersMs: 300, bodyMs: 300, minBytesPerSecond: 64 * 1024 };
  const url = `${(await seriesInstances(series))[0].url}/frames/1`;
  const accept = 'multipart/related; type="image/jpeg"; transfer-syntax=1.2.840.10008.1.2.4.50';
  for (const kind of ['stall', 'stall-body'] as const) {
    fault = { kind, times: 1 };
    const { body } = await get(url, accept, METADATA_LIMIT, timeouts);
    t.ok(body.length > 100, `${kind} once: retried, ${body.length} bytes`);
    fault = { kind, times: Infinity };
    const started = performance.now();
    await t.rejects(get(url, accept, METADATA_LIMIT, timeouts), {
      code: 'TILE_ERR_SLIDE_DICOMWEB_DOWN',
      message: `${url}: the DICOMweb server did not answer after 5 tries (${kind === 'stall' ? 'no answer in 0.3 s' : 'its body cut short: no body for 0.3 s'})`,
    });
    const seconds = (performance.now() - started) / 1000;
    t.ok(seconds < 10, `${kind}: given up after ${seconds.toFixed(1)} s (5 tries of 0.3 s, 3 s of backoff)`);
  }
});

t.test('metadata or frames whose body never ends: cut at what was asked for, refused naming the URL', async (t) => {
  fault = { kind: 'meta-endless', times: 100 };
  await t.rejects(openSlide(series), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: new RegExp(
      `^${series}/metadata: its answer came to \\d+ bytes and on, more than the ${METADATA_LIMIT.bytes} bytes a DICOM JSON answer may take; not read further$`,
    ),
  });
  t.equal(fault.times, 99, 'one try: not retried');
  fault = { kind: 'frames-endless', times: Infinity };
  const started = performance.now();
  await t.rejects(region(series), {
    code: 'TILE_ERR_SLIDE_DICOMWEB_REFUSED',
    message: new RegExp(
      `^${series}/instances/[0-9.]+/frames/[0-9,]+: its answer came to \\d+ bytes and on, more than the \\d+ bytes \\d+ frames? of \\d+ bytes of pixels each may take; not read further$`,
    ),
  });
  const seconds = (performance.now() - started) / 1000;
  t.ok(seconds < 10, `frames refused in ${seconds.toFixed(1)} s`);
});
