// A front's share of the service's connections, and the supervisor's sum of them, in-process:
// which responses close their connection, and what is reported and sent when.
import { EventEmitter } from 'node:events';
import t from 'tap';
import { ConnectionShare } from '../../src/front/connection-share.js';
import { ConnectionTally } from '../../supervisor/connection-tally.js';

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));
/** Sockets as net.Socket closes them: destroyed, then 'close'. */
const sockets = (n: number) => Array.from({ length: n }, () => Object.assign(new EventEmitter(), { destroyed: false }));
const close = (socket: ReturnType<typeof sockets>[number]) => {
  socket.destroyed = true;
  socket.emit('close');
};

t.test('a front over its share closes one connection per response until it holds its share', async (t) => {
  const reports: number[] = [];
  const share = new ConnectionShare((open) => reports.push(open), 1);
  const mine = sockets(10);
  for (const s of mine) share.track(s);
  t.notOk(share.shouldClose(mine[0]), 'no sum from the supervisor yet: nothing closes');
  await tick();
  t.same(reports, [10], 'its count, reported once');

  share.update(10, 1);
  t.notOk(share.shouldClose(mine[0]), 'a front alone holds every connection');
  share.update(16, 2);
  const closing = mine.filter((s) => share.shouldClose(s));
  t.equal(closing.length, 2, '10 of 16 with two fronts: two go (responses in flight count once)');
  t.ok(share.shouldClose(closing[0]), 'a leaving connection is asked again to close');
  for (const s of closing) close(s);
  t.notOk(share.shouldClose(mine[9]), 'at its share (8 of 16): none more');
  // A client that left mid-request: its response is still sent, on a closed connection.
  const gone = sockets(1)[0];
  share.track(gone);
  close(gone);
  share.update(12, 2);
  t.notOk(share.shouldClose(gone), 'a response on a connection its client closed: not counted as leaving');
  t.equal(mine.slice(2).filter((s) => share.shouldClose(s)).length, 2, '8 of 12: two of the live ones go');
  await tick();
  t.same(reports, [10, 8]);

  // The others' counts are older than its own: it does not close what may be its share.
  for (const s of sockets(12)) share.track(s);
  t.notOk(share.shouldClose(mine[9]), '20 here against a sum of 16: wait for the next sum');
  share.update(40, 2);
  t.notOk(share.shouldClose(mine[9]), '20 of 40: its share');
  share.update(30, 2);
  t.ok(share.shouldClose(mine[9]), '20 of 30: over');
});

t.test('the supervisor sends the sum when it or the number of fronts changed, at most once a period', async (t) => {
  const sent: [number, number][] = [];
  const tally = new ConnectionTally<string>((total, fronts) => sent.push([total, fronts]), 1);
  tally.join('a');
  tally.join('b');
  await tick();
  t.same(sent, [[0, 2]], 'two fronts listening, none holding a connection');
  tally.set('a', 30);
  tally.set('a', 60);
  tally.set('b', 4);
  await tick();
  t.same(sent.at(-1), [64, 2], 'reports within a period: one sum');
  t.equal(sent.length, 2);
  tally.join('a');
  tally.set('b', 4);
  await tick();
  t.equal(sent.length, 2, 'nothing changed: nothing sent (a front that joins again keeps its count)');
  tally.remove('a');
  await tick();
  t.same(sent.at(-1), [4, 1], 'a front gone: its connections and its share with it');
  tally.remove('a');
  await tick();
  t.equal(sent.length, 3, 'removed twice: sent once');
});
