/** Whether a line a process wrote to stderr says what went wrong ("FATAL ERROR: ... heap out of
 *  memory", "TypeError: ...", "vkCreateInstance failed"), rather than a stack frame ("    at f
 *  (file)", "1: 0x... node::OOMErrorHandler") or Node's closing "Node.js v22.x": the reason to give
 *  for a child process that died. */
export const namesError = (line: string): boolean => ERROR_LINE.test(line) && !STACK_FRAME.test(line);

const ERROR_LINE = /error|fatal|abort|failed|out of memory|killed/i;
const STACK_FRAME = /^\s*(at |\d+: 0x|-{3,}|<-{3,})/;

/** The last line of a child's stderr that says what went wrong, else its last but Node's closing
 *  version line: a crash ends with "Node.js v22.x", and a gpu-report row had read "the Vulkan probe
 *  failed: Node.js v22.23.3" (an attack session). */
export function crashReason(stderr: string): string | null {
  const said = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .reverse();
  return said.find(namesError) ?? said.find((l) => !/^Node\.js v\d/.test(l)) ?? null;
}
