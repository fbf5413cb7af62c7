// An s3:// slide's ranged GetObject requests against an S3-shaped server that misbehaves
// (helpers/range-faults.ts, as AWS_ENDPOINT_URL: no real store does so on demand;
// slide-remote.test.ts reads from a real one), held to the HTTP range reader's checks: one that
// never answers, one that stops mid-body, one that trickles a byte at a time, one that cuts its
// first answer short, one that pours on past the range. Before, the SDK's request handler had no
// timeouts at all: each held its slide forever; then a body that stopped, trickled or was cut
// short failed at once, where an HTTP range's is tried again.
import t from 'tap';
import { S3Transport } from '../src/client/slide/remote/s3-source.js';
import { BLOCK } from '../src/client/slide/remote/source.js';
import { misbehavingServer } from './helpers/misbehaving-server.js';
import { answerRange, checkFaults, faultTimeouts, rangeFile } from './helpers/range-faults.js';

const url = await misbehavingServer((fn) => t.teardown(fn), answerRange);
Object.assign(process.env, {
  AWS_ENDPOINT_URL: url(''),
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'test',
  AWS_SECRET_ACCESS_KEY: 'test',
});

t.test('a well-behaved range: the size, the ETag and the first block', async (t) => {
  const s3 = await S3Transport.open('s3://slides/ok.tif', faultTimeouts);
  t.equal(s3.size, rangeFile.length);
  t.equal(s3.etag, '"1"');
  t.ok(Buffer.from(s3.first).equals(rangeFile.subarray(0, BLOCK)));
  t.ok(Buffer.from(await s3.fetch(BLOCK, 100)).equals(rangeFile.subarray(BLOCK, BLOCK + 100)), 'a later range');
});

checkFaults(t, {
  open: (name) => S3Transport.open(`s3://slides/${name}`, faultTimeouts),
  url: (name) => `s3://slides/${name}`,
});
