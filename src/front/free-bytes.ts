// A request's bytes freed as soon as the workers have them, not when V8's collector gets to them.
// A large body (a v2 batch of 32 tiles, 4.8 MB; a raw tile, 150 KB) outlives the scavenges of its
// request's round trip, so it is promoted to the old generation, where only a mark-compact frees
// it; and V8 starts a mark-compact each time 64 MB more of such memory is alive than after the
// last ("external memory pressure"). Under v2 batches of 32 that was one every 13 requests, and
// the collector a third of the front's CPU (perf; docs/open-inference-protocol.md). Detaching the
// ArrayBuffer frees the memory at once and tells V8 so.

type Detachable = ArrayBuffer & { transfer(length: number): ArrayBuffer; readonly detached: boolean };

/** Frees `bytes`' memory now, when they are the whole of their ArrayBuffer (not a slice of a
 *  larger one, as Node's pool hands out): every view of it reads as empty after. Nothing may read
 *  them again: neither the caller, nor a socket write still carrying them. */
export function freeBytes(bytes: Uint8Array): void {
  const buffer = bytes.buffer as Detachable;
  if (
    !(buffer instanceof ArrayBuffer) ||
    buffer.detached ||
    bytes.byteOffset !== 0 ||
    bytes.byteLength !== buffer.byteLength
  )
    return;
  try {
    buffer.transfer(0);
  } catch {
    // Not detachable (Node 24 marks its Buffer pool so): the collector's, as before.
  }
}
