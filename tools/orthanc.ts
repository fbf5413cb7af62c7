// A real Orthanc (Debian's orthanc) with its DICOMweb plugin (orthanc-dicomweb), started on a free
// port with its own configuration and storage (no service manager), and DICOM WSI made from the
// synthetic TIFFs by OrthancWSIDicomizer (orthanc-wsi). The DICOM tests and bench:slide use it.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createServer } from 'node:net';
import { waitFor } from './service-process.js';
import { tempDir } from './temp-dir.js';

/** Debian's orthanc-dicomweb puts the plugin here (its /etc/orthanc/orthanc.json loads the
 *  folder /usr/share/orthanc/plugins/). */
const DICOMWEB_PLUGIN = '/usr/share/orthanc/plugins/libOrthancDicomWeb.so';

export interface Orthanc {
  /** The REST API's root. */
  url: string;
  /** The DICOMweb root: URL/dicom-web. */
  dicomWeb: string;
  /** Stores DICOM files (Orthanc's REST POST /instances). */
  upload(files: string[]): Promise<void>;
  stop(): Promise<void>;
}

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** `users`: HTTP basic credentials the server demands (none: open). */
export async function startOrthanc(users?: Record<string, string>): Promise<Orthanc> {
  const dir = tempDir('orthanc');
  const port = await freePort();
  const config = {
    Name: 'tile-infer-test',
    StorageDirectory: join(dir, 'db'),
    IndexDirectory: join(dir, 'db'),
    Plugins: [DICOMWEB_PLUGIN],
    HttpPort: port,
    DicomServerEnabled: false,
    RemoteAccessAllowed: false,
    AuthenticationEnabled: !!users,
    RegisteredUsers: users ?? {},
    HttpCompressionEnabled: false,
    // Orthanc 1.10 by default answers "too many requests" past a few concurrent jobs.
    HttpThreadsCount: 16,
    DicomWeb: { Enable: true, Root: '/dicom-web/', EnableWado: false },
  };
  writeFileSync(join(dir, 'orthanc.json'), JSON.stringify(config));
  const proc: ChildProcess = spawn('Orthanc', [join(dir, 'orthanc.json')], { stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  proc.stdout!.on('data', (d: Buffer) => log.push(d.toString()));
  proc.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const auth: Record<string, string> = users
    ? { authorization: `Basic ${Buffer.from(Object.entries(users)[0].join(':')).toString('base64')}` }
    : {};
  await waitFor(async () => {
    if (proc.exitCode !== null) throw new Error(`Orthanc exited with ${proc.exitCode}: ${log.join('')}`);
    return fetch(`${url}/system`, { headers: auth }).then(
      (r) => r.ok,
      () => false,
    );
  }, 60_000);
  return {
    url,
    dicomWeb: `${url}/dicom-web`,
    async upload(files) {
      for (const f of files) {
        const r = await fetch(`${url}/instances`, {
          method: 'POST',
          body: readFileSync(f),
          headers: { ...auth, 'content-type': 'application/dicom' },
        });
        if (!r.ok) throw new Error(`Orthanc refused ${f}: ${r.status} ${await r.text()}`);
      }
    },
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** OrthancWSIDicomizer's folder of instances for `tiff`; `imaged` is the specimen's width and
 *  height in mm as given to the converter. */
export async function dicomize(
  tiff: string,
  out: string,
  imaged: [number, number],
  args: string[] = [],
): Promise<string[]> {
  mkdirSync(out, { recursive: true });
  await promisify(execFile)('OrthancWSIDicomizer', [
    '--folder',
    out,
    '--imaged-width',
    String(imaged[0]),
    '--imaged-height',
    String(imaged[1]),
    ...args,
    tiff,
  ]);
  return readdirSync(out)
    .sort()
    .map((f) => join(out, f));
}

/** The study and series UIDs of a DICOM file, from dcmdump (dcmtk, which orthanc-wsi brings). */
export async function uidsOf(file: string): Promise<{ study: string; series: string }> {
  const { stdout } = await promisify(execFile)('dcmdump', ['+P', '0020,000d', '+P', '0020,000e', file]);
  const [study, series] = stdout.split('\n').map((l) => /\[([0-9.]+)\]/.exec(l)?.[1]);
  return { study: study!, series: series! };
}
