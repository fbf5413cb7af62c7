// `npm run bench:decode`: the tile decoder alone, as a worker runs it, on distinct synthetic H&E
// tiles (224x224 at 0.5 MPP, 512x512 at 8 MPP): ms per tile, CPU ms per tile (every thread of
// this process, libuv pool included) and JS-thread CPU ms per tile (from /proc, Linux) one at a
// time, then tiles/s with N decodes in flight.
// Decoding runs on the libuv pool, so UV_THREADPOOL_SIZE plays decode_threads here.
import { readFileSync } from 'node:fs';
import { cellularTile, encodePng, slideTile } from '../tools/synthetic/tissue.js';
import { decodePng } from '../src/tile/png.js';

/** CPU ms of the main (JS) thread so far: utime + stime of its /proc task, in clock ticks of 10 ms. */
function jsThreadCpuMs(): number {
  const fields = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const CONCURRENCY = [1, 2, 4, 8];
const sets: [string, Buffer[], number][] = [
  ['224x224', Array.from({ length: 16 }, (_, i) => encodePng(cellularTile(i + 1, 224))), 400],
  [
    '512x512',
    Array.from({ length: 16 }, (_, i) =>
      encodePng(slideTile({ size: 512, seed: i + 1, stain: 'he', tissue: 0.6, pale: 0.3, fat: 0.2, dust: 0.1 })),
    ),
    120,
  ],
];

async function run(
  tiles: Buffer[],
  count: number,
  inFlight: number,
): Promise<{ ms: number; cpuMs: number; jsMs: number; perSecond: number }> {
  let next = 0;
  const started = performance.now();
  const cpu = process.cpuUsage();
  const js = jsThreadCpuMs();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) await decodePng(tiles[next++ % tiles.length]);
    }),
  );
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return {
    ms: wall / count,
    cpuMs: (used.user + used.system) / 1000 / count,
    jsMs: (jsThreadCpuMs() - js) / count,
    perSecond: (count * 1000) / wall,
  };
}

console.log(`decode_threads (UV_THREADPOOL_SIZE) = ${process.env.UV_THREADPOOL_SIZE ?? '4 (libuv default)'}`);
console.log(
  `| tile | ms/tile | CPU ms/tile | JS-thread CPU ms/tile | ${CONCURRENCY.map((c) => `tiles/s, ${c} in flight`).join(' | ')} |`,
);
console.log(`|---|---|---|---|${CONCURRENCY.map(() => '---').join('|')}|`);
for (const [name, tiles, count] of sets) {
  await run(tiles, count / 4, 1);
  const one = await run(tiles, count, 1);
  const rates: string[] = [];
  for (const c of CONCURRENCY) rates.push((await run(tiles, count, c)).perSecond.toFixed(0));
  console.log(
    `| ${name} | ${one.ms.toFixed(2)} | ${one.cpuMs.toFixed(2)} | ${one.jsMs.toFixed(2)} | ${rates.join(' | ')} |`,
  );
}
