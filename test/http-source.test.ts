// A slide's HTTP range requests against a server that misbehaves (helpers/range-faults.ts): one
// that never answers, one that stops mid-body, one that trickles a byte at a time within the idle
// timeout, one that cuts its first answer short, one that pours on past the range. Before,
// undici's 300 s timeouts held a run about 20 minutes on the first two (the third forever, at any
// idle timeout), and a body cut short failed the slide at once with "other side closed", no code,
// no URL.
import t from 'tap';
import { HttpTransport } from '../src/client/slide/remote/http-source.js';
import { misbehavingServer } from './helpers/misbehaving-server.js';
import { answerRange, checkFaults, faultTimeouts } from './helpers/range-faults.js';

const url = await misbehavingServer((fn) => t.teardown(fn), answerRange);

checkFaults(t, { open: (name) => HttpTransport.open(url(`/${name}`), faultTimeouts), url: (name) => url(`/${name}`) });
