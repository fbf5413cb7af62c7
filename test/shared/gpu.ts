// GPU plumbing without a GPU: nvidia-smi's output as recorded on GPU hosts, pinning, device-fault
// messages as ONNX Runtime writes them, batch shapes, and the CUDA provider check and installer on
// fabricated libraries (the real ones cannot be downloaded here).
import t from 'tap';
import AdmZip from 'adm-zip';
import type autocannon from 'autocannon';
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  parseComputeApps,
  parseGpuProcesses,
  parseGpus,
  parseMigDevices,
  queryGpus,
  queryMigDevices,
} from '../../src/gpu/nvidia-smi.js';
import { pciAddress, pinningEnv } from '../../src/gpu/pinning.js';
import { isDeviceFault } from '../../src/gpu/device-faults.js';
import {
  bundledVersion,
  checkCudaProvider,
  installRecordProblem,
  INSTALL_RECORD,
} from '../../src/gpu/cuda-provider.js';
import { vulkanDevices } from '../../src/gpu/vulkan.js';
import { candidateShapes, everyBatchSize, padTo, servedShapes } from '../../src/worker/batch-shapes.js';
import { MAX_BATCH } from '../../src/lib/batch-bound.js';
import { crashReason } from '../../src/lib/stderr-error.js';
import { install } from '../../tools/cuda-install.js';
import { errorCount, errorKinds } from '../../bench/load.js';
import { ROOT } from '../helpers/server.js';
import { fakeNvidiaSmi } from '../helpers/packages.js';
import { tempDir } from '../../tools/temp-dir.js';

// Recorded on a 2 x H100 host (nvidia-smi 550.54.15), with the service's query options.
const GPUS = `0, NVIDIA H100 80GB HBM3, GPU-5c2e7a41-9d0b-3f4e-8b7a-1f2e3d4c5b6a, 00000000:18:00.0, 81559, 1536, 3, 550.54.15
1, NVIDIA H100 80GB HBM3, GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90, 00000000:3B:00.0, 81559, 4, 0, 550.54.15
`;
const APPS = `812345, 1536
812399, 20480
812345, 512
812400, [N/A]
`;

t.test('nvidia-smi: GPUs with their identity, memory per process', async (t) => {
  const gpus = parseGpus(GPUS);
  t.same(gpus[1], {
    index: '1',
    name: 'NVIDIA H100 80GB HBM3',
    uuid: 'GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90',
    pci_bus_id: '00000000:3B:00.0',
    memory_total_mib: 81559,
    memory_used_mib: 4,
    utilization_pct: 0,
    driver: '550.54.15',
  });
  t.same(
    parseGpus(`NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n${GPUS}`),
    gpus,
    "a line that is not a GPU's is not one",
  );
  const apps = parseComputeApps(APPS);
  t.equal(apps.get(812345), 2048, 'a process on two GPUs: summed');
  t.equal(apps.get(812399), 20480);
  t.notOk(apps.has(812400), '[N/A] (MIG, no permission) is unknown, not 0');
  t.same(parseComputeApps(''), new Map(), 'no compute process');
  // gpu-report's pinning check: on which GPU each process holds memory.
  const uuids = gpus.map((g) => g.uuid);
  const byGpu = parseGpuProcesses(
    `812345, ${uuids[0]}, 1536\n812399, ${uuids[0]}, 20480\n812345, ${uuids[1]}, 512\n812400, ${uuids[1]}, [N/A]\n`,
  );
  t.same(
    byGpu.filter((p) => p.pid === 812345).map((p) => p.gpu_uuid),
    uuids,
    'a process on two GPUs: both, so not pinned',
  );
  t.same(
    byGpu.find((p) => p.pid === 812400),
    { pid: 812400, gpu_uuid: uuids[1], used_mib: null },
    '[N/A] memory is unknown',
  );
});

// nvidia-smi -L on hosts with MIG devices, in the forms of NVIDIA's MIG user guide: drivers from
// R470 name a MIG device by its own UUID; R450 and R460 by its GPU's and its instances.
const MIG_LIST = `GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 2g.10gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90)
`;
const MIG_LIST_R450 = `GPU 0: A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c)
  MIG 3g.20gb Device 0: (UUID: MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c/1/0)
`;

t.test('nvidia-smi -L: MIG devices under their GPU', async (t) => {
  t.same(parseMigDevices(MIG_LIST), [
    { uuid: 'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f', gpu: '0', name: 'MIG 3g.20gb Device 0' },
    { uuid: 'MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb', gpu: '0', name: 'MIG 2g.10gb Device 1' },
  ]);
  t.same(parseMigDevices(MIG_LIST_R450), [
    { uuid: 'MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c98c2c8c/1/0', gpu: '0', name: 'MIG 3g.20gb Device 0' },
  ]);
  t.same(parseMigDevices(`No devices were found\n${GPUS}`), [], 'lines that are no GPU list: no device');
  t.same(
    parseMigDevices('  MIG 1g.10gb Device 0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n'),
    [],
    'a MIG line under no GPU is not taken',
  );
  t.same(
    parseMigDevices(
      `${MIG_LIST.split('\n').slice(0, 2).join('\n')}\nGPU 1: Unknown Error\n  MIG 1g.5gb Device 0: (UUID: MIG-0e6b6e4c-7d3a-5b8e-9f10-2a3b4c5d6e7f)\n`,
    ).map((d) => [d.uuid.slice(0, 12), d.gpu]),
    [['MIG-c6d4f1ef', '0']],
    'under a GPU line that does not parse, a MIG line is not given to the GPU before it',
  );
  // The real call, through a fake nvidia-smi on PATH (the test helper's -L answer).
  const bin = fakeNvidiaSmi(GPUS.trim().split('\n'), null, { 1: ['MIG-0e6b6e4c-7d3a-5b8e-9f10-2a3b4c5d6e7f'] });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  t.teardown(() => {
    process.env.PATH = path;
  });
  t.same(await queryMigDevices(), [
    { uuid: 'MIG-0e6b6e4c-7d3a-5b8e-9f10-2a3b4c5d6e7f', gpu: '1', name: 'MIG 1g.10gb Device 0' },
  ]);
});

t.test('pinning: CUDA in PCI order, Vulkan through the PCI address', async (t) => {
  t.equal(pciAddress('00000000:3B:00.0'), '0000:3b:00.0');
  t.equal(pciAddress('garbage'), null);
  const [gpu0] = parseGpus(GPUS);
  t.same(pinningEnv('0', gpu0), {
    CUDA_VISIBLE_DEVICES: '0',
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    DRI_PRIME: 'pci-0000_18_00_0',
    MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: '1',
  });
  t.same(
    pinningEnv(null, undefined),
    { CUDA_VISIBLE_DEVICES: '', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' },
    'a CPU worker sees no GPU',
  );
  t.same(
    pinningEnv('5', undefined),
    { CUDA_VISIBLE_DEVICES: '5', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' },
    'a GPU nvidia-smi does not list: CUDA only',
  );
  t.same(
    pinningEnv('MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f', undefined),
    { CUDA_VISIBLE_DEVICES: 'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' },
    'a MIG device: CUDA, by its UUID',
  );
});

t.test('device faults: what ONNX Runtime says when the device, not the request, failed', async (t) => {
  for (const message of [
    'CUDA failure 700: an illegal memory access was encountered ; GPU=0 ; hostname=h ; file=cuda_call.cc ; line=129 ; expr=cudaStreamSynchronize(stream);',
    'CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=0 ; expr=cublasSgemm',
    'CUDNN failure 4000: CUDNN_STATUS_INTERNAL_ERROR ; GPU=1',
    "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node. Name:'Conv_3' Status Message: Failed to allocate memory for requested buffer of size 1073741824",
    'CUDA error cudaErrorMemoryAllocation:out of memory',
    'WebGPU device lost (2): Device was lost',
  ])
    t.ok(isDeviceFault(message), message);
  for (const message of [
    '[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: image for the following indices index: 1 Got: 4 Expected: 3',
    'Non-zero status code returned while running Reshape node',
  ])
    t.notOk(isDeviceFault(message), message);
});

t.test('batch shapes: candidates, what is served, padding', async (t) => {
  t.same(candidateShapes('auto', 'cpu', 16), [1], 'cpu: one tile per run');
  t.same(candidateShapes('auto', 'webgpu', 4), [4], 'GPU providers: every batch padded to the largest');
  t.same(candidateShapes([8, 2, 64], 'cuda', 16), [2, 8], 'a list, within the largest batch');
  const check = (batch: number, identical: boolean) => ({ batch, ms: 1, identical });
  t.same(servedShapes('auto', [check(1, true)], true, false, 16), [1]);
  t.same(
    servedShapes('auto', [check(1, false), check(2, true), check(3, false), check(4, true)], true, false, 4),
    [2, 4],
    'a lone tile runs as two, three as four',
  );
  t.same(
    servedShapes('auto', [check(1, false), check(2, false)], false, false, 2),
    [1, 2],
    'a nondeterministic provider keeps every shape',
  );
  t.same(
    servedShapes('auto', [check(1, true), check(2, true)], true, true, 2),
    [1],
    'a graph that mixes its batch: one tile per run',
  );
  t.same(
    servedShapes([4, 8], [check(4, false), check(8, false)], true, false, 8),
    [1],
    'no shape holds: one tile per run',
  );
  t.same(servedShapes('any', [check(1, true)], true, false, 4), [1, 2, 3, 4], '"any": no padding');
  // batch.max 1e9 (before the schema bounded it) ran the worker out of heap here at every load:
  // anything over the bound is refused, not built.
  const over = /over 4096 \(batch\.max's bound\)/;
  t.throws(() => servedShapes('any', [check(1, true)], true, false, MAX_BATCH + 1), over, '"any" over the bound');
  t.throws(() => candidateShapes('any', 'cuda', 1e9), over);
  t.equal(everyBatchSize(MAX_BATCH).length, MAX_BATCH);
  t.equal(padTo([2, 4, 16], 1), 2);
  t.equal(padTo([2, 4, 16], 5), 16);
  t.equal(padTo([2, 4, 16], 4), 4);
});

t.test('the Vulkan probe lists what the loader shows, software rasterizers marked', async (t) => {
  const devices = vulkanDevices();
  if (devices === null) return t.pass('no Vulkan loader on this machine');
  for (const d of devices) {
    t.match(d, { name: String, type: /^(other|integrated|discrete|virtual|cpu)$/, uuid: /^GPU-[0-9a-f-]{36}$/ });
    if (/llvmpipe|lavapipe|swiftshader/i.test(d.name)) t.ok(d.software, `${d.name} is software`);
  }
});

/** A file the check reads as an x86-64 ELF library carrying `strings`. */
function fakeLibrary(path: string, ...strings: string[]): void {
  const header = Buffer.alloc(64);
  header.write('\x7fELF', 0, 'latin1');
  header[4] = 2;
  header[5] = 1;
  header.writeUInt16LE(0x3e, 18);
  writeFileSync(
    path,
    Buffer.concat([header, ...strings.map((s) => Buffer.from(`\0${s}\0`, 'latin1')), Buffer.alloc(32)]),
  );
}

const version = bundledVersion();
const folder = (cuda: string[] | null, shared = true) => {
  const dir = tempDir('ort');
  if (cuda) fakeLibrary(join(dir, 'libonnxruntime_providers_cuda.so'), 'CUDAExecutionProvider', ...cuda);
  if (shared) fakeLibrary(join(dir, 'libonnxruntime_providers_shared.so'));
  return dir;
};

t.test('the CUDA provider check: fabricated libraries, matching and not', async (t) => {
  t.match(version, /^\d+\.\d+\.\d+$/, `bundled libonnxruntime ${version}`);
  t.same(checkCudaProvider(folder(null, false), version), { state: 'absent' });
  t.same(
    checkCudaProvider(folder([version, '12.4.1']), version),
    { state: 'ok', version },
    'the version string of the bundled release',
  );
  t.match(checkCudaProvider(folder(['1.22.0']), version), {
    state: 'problem',
    problem: new RegExp(
      `is from another ONNX Runtime release: it carries version 1\\.22\\.0, not ${version.replace(/\./g, '\\.')}`,
    ),
  });
  t.match(checkCudaProvider(folder([]), version), {
    state: 'problem',
    problem: /carries no ONNX Runtime version string/,
  });
  t.match(checkCudaProvider(folder([version], false), version), {
    state: 'problem',
    problem: /libonnxruntime_providers_cuda\.so is there but not libonnxruntime_providers_shared\.so/,
  });
  const text = folder(null);
  writeFileSync(join(text, 'libonnxruntime_providers_cuda.so'), `not a library ${version}`);
  t.match(checkCudaProvider(text, version), {
    state: 'problem',
    problem: /libonnxruntime_providers_cuda\.so is not an ELF shared library/,
  });
});

/** A NuGet package as Microsoft.ML.OnnxRuntime.Gpu.Linux lays it out. */
function nupkg(packageVersion: string, libraryVersion: string): string {
  const zip = new AdmZip();
  const lib = (name: string, ...s: string[]) => {
    const dir = tempDir('lib');
    fakeLibrary(join(dir, name), ...s);
    zip.addFile(`runtimes/linux-x64/native/${name}`, readFileSync(join(dir, name)));
  };
  lib('libonnxruntime_providers_cuda.so', libraryVersion);
  lib('libonnxruntime_providers_shared.so');
  zip.addFile(
    'Microsoft.ML.OnnxRuntime.Gpu.Linux.nuspec',
    Buffer.from(
      `<package><metadata><id>Microsoft.ML.OnnxRuntime.Gpu.Linux</id><version>${packageVersion}</version></metadata></package>`,
    ),
  );
  const file = join(tempDir('nupkg'), `microsoft.ml.onnxruntime.gpu.linux.${packageVersion}.nupkg`);
  zip.writeZip(file);
  return file;
}

t.test('npm run cuda:install: from a local package, checked before anything is copied', async (t) => {
  const dest = tempDir('dest');
  const files = install(nupkg(version, version), dest);
  t.same(files.map((f) => f.slice(dest.length + 1)).sort(), [
    'libonnxruntime_providers_cuda.so',
    'libonnxruntime_providers_shared.so',
  ]);
  t.same(checkCudaProvider(dest, version), { state: 'ok', version });
  t.equal(JSON.parse(readFileSync(join(dest, INSTALL_RECORD), 'utf8')).version, version);
  t.equal(installRecordProblem(dest, version), null, 'the record matches the files');
  writeFileSync(join(dest, 'libonnxruntime_providers_cuda.so'), 'replaced');
  t.match(installRecordProblem(dest, version), /libonnxruntime_providers_cuda\.so changed after npm run cuda:install/);

  const empty = tempDir('dest');
  t.throws(
    () => install(nupkg('1.22.0', '1.22.0'), empty),
    new RegExp(`is ONNX Runtime 1\\.22\\.0, expected ${version.replace(/\./g, '\\.')} .*nothing installed`),
  );
  const mislabelled = tempDir('lib');
  fakeLibrary(join(mislabelled, 'libonnxruntime_providers_cuda.so'), '1.22.0');
  fakeLibrary(join(mislabelled, 'libonnxruntime_providers_shared.so'));
  t.throws(
    () => install(mislabelled, empty),
    /carries version 1\.22\.0.*nothing installed/,
    'a folder: the library itself is checked',
  );
  mkdirSync(join(empty, 'x'));
  t.throws(
    () => install(join(empty, 'x'), empty),
    /has no libonnxruntime_providers_cuda\.so nor libonnxruntime_providers_shared\.so/,
  );

  // The command: exit status 2 and one line.
  const run = await new Promise<{ code: number | null; stderr: string }>((resolve) =>
    execFile(
      process.execPath,
      [join(ROOT, 'dist/tools/cuda-install.js'), nupkg('1.22.0', '1.22.0'), '--dest', empty],
      (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stderr }),
    ),
  );
  t.equal(run.code, 2);
  t.match(run.stderr, /^cuda:install: .*is ONNX Runtime 1\.22\.0, expected/);
});

t.test("gpu-report's load errors by kind: autocannon counts timeouts among its errors", async (t) => {
  const result = {
    errors: 3,
    timeouts: 1,
    non2xx: 6397,
    statusCodeStats: { '200': { count: 900 }, '503': { count: 6395 }, '504': { count: 2 } },
  } as unknown as autocannon.Result;
  t.same(errorKinds(result), { '503': 6395, '504': 2, socket: 2, timeout: 1 });
  t.equal(errorCount(result), 6400, 'each request without a 2xx once');
  t.same(errorKinds({ errors: 0, timeouts: 0, non2xx: 0, statusCodeStats: { '200': { count: 5 } } } as never), {});
});

t.test('an nvidia-smi that hangs is said to have not answered in time', async (t) => {
  const bin = tempDir('hung-smi');
  writeFileSync(join(bin, 'nvidia-smi'), '#!/bin/sh\nexec sleep 30\n', { mode: 0o755 });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  t.teardown(() => {
    process.env.PATH = path;
  });
  await t.rejects(queryGpus(200), { message: 'nvidia-smi did not answer within 200 ms' });
});

t.test("a child's crash is given by the line that says what went wrong, not Node's version", async (t) => {
  const crash = [
    '/opt/kit/dist/src/gpu/pinning.js:3',
    '    return busId.trim();',
    '                 ^',
    '',
    "TypeError: Cannot read properties of undefined (reading 'trim')",
    '    at pciAddress (/opt/kit/dist/src/gpu/pinning.js:3:18)',
    '',
    'Node.js v22.23.3',
  ].join('\n');
  t.equal(crashReason(crash), "TypeError: Cannot read properties of undefined (reading 'trim')");
  t.equal(
    crashReason('vkCreateInstance failed (VkResult -1)\nNode.js v24.1.0\n'),
    'vkCreateInstance failed (VkResult -1)',
  );
  t.equal(
    crashReason('no such device\nNode.js v22.1.0'),
    'no such device',
    'none names an error: the last but the version',
  );
  t.equal(crashReason(''), null);
});
