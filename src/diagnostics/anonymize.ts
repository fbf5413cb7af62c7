// Scrubs what /diagnostics must not reveal from every string it returns, log lines included:
// hostname, user names, home and install paths, non-loopback IP and MAC addresses, environment
// variable values and slide names.
import { homedir, hostname, userInfo } from 'node:os';

const IPV4 = /\b(?!127\.)(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b/g;
const IPV6 = /(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?![\w:])/gi;
/** An IPv6 address rather than a time of day or a C++ scope: "::" between hex groups, or 4+ groups. */
const isIpv6 = (m: string) => m !== '::1' && (m.includes('::') ? m.split(':').filter(Boolean).length >= 2 : m.split(':').length >= 4);
const MAC = /\b(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}\b/gi;
/** Values too short or too generic to be secrets, and which would wreck the payload if scrubbed. */
const isGeneric = (value: string) => value.length < 6 || /^v?\d+(\.\d+)*$/.test(value) || /^(true|false|production|development)$/i.test(value);

export interface AnonymizerSources {
  env?: NodeJS.ProcessEnv;
  /** Paths that locate the installation (repo root, working directory, data and model folders). */
  installPaths?: string[];
  /** Slide names seen in requests, scrubbed if they ever reach a log line. */
  slideNames?: () => Iterable<string>;
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class Anonymizer {
  private readonly fixed: [RegExp, string][];

  constructor(private readonly sources: AnonymizerSources = {}) {
    const env = sources.env ?? process.env;
    const pairs: [string, string][] = [];
    for (const path of sources.installPaths ?? []) pairs.push([path.replace(/\/$/, ''), '<install>']);
    pairs.push([homedir(), '<home>']);
    pairs.push([hostname(), '<host>']);
    try {
      pairs.push([userInfo().username, '<user>']);
    } catch {
      // no passwd entry for this uid: nothing to hide
    }
    for (const name of ['USER', 'LOGNAME', 'HOSTNAME', 'HOME']) if (env[name]) pairs.push([env[name]!, `<${name.toLowerCase()}>`]);
    for (const [name, value] of Object.entries(env)) if (value && !isGeneric(value)) pairs.push([value, `<env:${name}>`]);
    // Longest first, so a path is replaced before the user name inside it. Short values (a host
    // called "vm", a user called "root") only as whole words, so other words survive.
    this.fixed = pairs
      .filter(([v]) => v && v.length >= 2)
      .sort((a, b) => b[0].length - a[0].length)
      .map(([v, label]) => [new RegExp(v.length < 6 ? `(?<!\\w)${escape(v)}(?!\\w)` : escape(v), 'g'), label]);
  }

  scrubString(text: string): string {
    let out = text;
    for (const [secret, label] of this.fixed) out = out.replace(secret, label);
    for (const slide of this.sources.slideNames?.() ?? []) if (slide.length >= 3 && out.includes(slide)) out = out.split(slide).join('<slide>');
    return out.replace(MAC, '<mac>').replace(IPV4, '<ip>').replace(IPV6, (m) => (isIpv6(m) ? '<ip>' : m));
  }

  /** A deep copy with every string (keys included) scrubbed. */
  scrub<T>(value: T): T {
    if (typeof value === 'string') return this.scrubString(value) as T;
    if (Array.isArray(value)) return value.map((v) => this.scrub(v)) as T;
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [this.scrubString(k), this.scrub(v)])) as T;
    }
    return value;
  }
}
