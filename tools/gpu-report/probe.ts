// The report's child process for what may hang or crash in native code, one JSON line per result:
//   probe.js vulkan                                        the Vulkan devices (null: no loader)
//   probe.js floor <package dir> <provider> <seconds> <batch>...   ONNX Runtime alone per batch
import { readPackage } from '../../src/model-package/model-package.js';
import { vulkanDevices } from '../../src/gpu/vulkan.js';
import { measureFloor } from '../../bench/floor.js';
import { reportTiles } from './tiles.js';

const [command, ...args] = process.argv.slice(2);
if (command === 'vulkan') {
  process.stdout.write(JSON.stringify(vulkanDevices()) + '\n');
} else if (command === 'floor') {
  const [dir, provider, seconds, ...batches] = args;
  const pkg = readPackage(dir);
  const { pngs } = reportTiles(pkg.manifest, Math.max(...batches.map(Number)));
  for (const batch of batches.map(Number))
    process.stdout.write(JSON.stringify(await measureFloor(pkg, pngs, batch, Number(seconds), provider)) + '\n');
} else {
  process.stderr.write(`unknown probe ${command}\n`);
  process.exitCode = 2;
}
