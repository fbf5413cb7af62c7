// V8 flags for the processes that carry tiles (HTTP fronts, model workers). Every tile passes
// through a few hundred kB of Buffers (body, PNG, scanlines, pixels, tensors), which V8 counts
// towards its heap limits as external memory. With the default limits, sized from these
// processes' small heaps (11-20 MB), that churn alone started a full mark-compact every ~40
// tiles in each process: a third of a worker's CPU. A larger initial old-generation size lets
// young-generation collections, which free those Buffers too, do the work: on the null-model
// worker pipeline 44 mark-compacts per 1,700 tiles became 0 (and 2 in 10,200), 3.0 -> 2.35 CPU
// ms per tile, the same RSS.
export const TILE_PROCESS_EXEC_ARGV = ['--initial-old-space-size=128'];
