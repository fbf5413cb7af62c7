// A local HTTP server for tests of a client against a server that misbehaves (Node's own: no real
// server stalls or trickles on demand), closed when the test ends.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Serves `answer` on 127.0.0.1 until `teardown`'s callback runs; gives the URL of a path. */
export async function misbehavingServer(
  teardown: (fn: () => void) => void,
  answer: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<(path: string) => string> {
  const server = createServer(answer);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return (path) => `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
}

/** Writes `bytes` one byte every `everyMs`, never ending the answer, until the client goes. */
export function trickle(res: ServerResponse, bytes: Uint8Array, everyMs: number): void {
  let at = 0;
  const drip = setInterval(() => res.write(bytes.subarray(at, ++at)), everyMs);
  res.on('close', () => clearInterval(drip));
}

/** Answers 200 with `type` and a body that pours on, 1 MiB pieces as fast as the client takes them,
 *  never ending; cut after `mib` MiB, so that a client without a limit fails (its body cut short)
 *  instead of filling memory. */
export function pour(res: ServerResponse, type: string, mib: number): void {
  if (!res.headersSent) res.writeHead(200, { 'content-type': type });
  const piece = Buffer.alloc(1 << 20, 0x20);
  let sent = 0;
  const more = () => {
    while (sent < mib && !res.destroyed) {
      sent++;
      if (!res.write(piece)) return;
    }
    if (sent >= mib) res.destroy();
  };
  res.on('drain', more);
  more();
}
