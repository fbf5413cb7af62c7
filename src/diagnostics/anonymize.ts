// Scrubs what /diagnostics must not reveal from every string it returns, log lines included:
// hostname, user names, home and install paths, non-loopback IP and MAC addresses, environment
// variable values and slide names.
import { homedir, hostname, userInfo } from 'node:os';

const IPV4 = /\b(?!127\.)(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b/g;
const IPV6 = /\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b|\b(?:[0-9a-f]{1,4}:){1,6}:(?:[0-9a-f]{1,4})?\b/gi;
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

export class Anonymizer {
  private readonly fixed: [string, string][];

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
    // Longest first, so a path is replaced before the user name inside it.
    this.fixed = pairs.filter(([v]) => v && v.length >= 2).sort((a, b) => b[0].length - a[0].length);
  }

  scrubString(text: string): string {
    let out = text;
    for (const [secret, label] of this.fixed) if (out.includes(secret)) out = out.split(secret).join(label);
    for (const slide of this.sources.slideNames?.() ?? []) if (slide.length >= 3 && out.includes(slide)) out = out.split(slide).join('<slide>');
    return out.replace(MAC, '<mac>').replace(IPV4, '<ip>').replace(IPV6, (m) => (m === '::1' ? m : '<ip>'));
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
