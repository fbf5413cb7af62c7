// Scrubs what /diagnostics must not reveal from every string it returns, log lines included:
// hostname, user names, home and install paths, non-loopback IP and MAC addresses, secret-looking
// environment variable values and slide names. It rewrites free text only: the payload's own data
// (keys, states, model names, ids, numbers) reaches the client as it is, whatever a client sends
// as slide_name and whatever the environment holds.
import { homedir, hostname, userInfo } from 'node:os';

const IPV4 = /\b(?!127\.)(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b/g;
const IPV6 = /(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?![\w:])/gi;
/** An IPv6 address rather than a time of day or a C++ scope: "::" between hex groups, or 4+ groups. */
const isIpv6 = (m: string) =>
  m !== '::1' && (m.includes('::') ? m.split(':').filter(Boolean).length >= 2 : m.split(':').length >= 4);
const MAC = /\b(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}\b/gi;
/** Values too short or too generic to be secrets, and which would wreck the payload if scrubbed. */
const isGeneric = (value: string) =>
  value.length < 4 ||
  /^v?\d+(\.\d+)*$/.test(value) ||
  /^(true|false|yes|no|on|off|production|development)$/i.test(value);
/** Variables whose name says they hold a credential. */
const SECRET_NAME = /KEY|SECRET|TOKEN|PASS|CREDENTIAL|AUTH|COOKIE|PRIVATE|SIGNATURE|DSN/i;
/** Values shaped like a credential whatever the variable is called: a URL with a user or
 *  password, or a long random-looking token (letters and digits, no spaces). */
const isCredentialShaped = (value: string) =>
  /^[a-z][\w+.-]*:\/\/[^/\s]*@/i.test(value) ||
  (/^[\w+/=.-]{20,}$/.test(value) && /\d/.test(value) && /[a-z]/i.test(value) && !value.includes('/'));
/** A single token (a name, state, id, hash, timestamp or number) is data; anything else (log
 *  lines, messages, paths, JSON) is free text, where slide names are looked for. */
const isFreeText = (text: string) => /[^\w.#:+-]/.test(text);
/** Characters that continue a token: a slide "gene" is not in "gene-expr" nor in "genes". */
const TOKEN = '[\\w-]';

export interface AnonymizerSources {
  env?: NodeJS.ProcessEnv;
  /** Paths that locate the installation (repo root, working directory, data and model folders). */
  installPaths?: string[];
  /** Slide names seen in requests, scrubbed if they ever reach a log line. */
  slideNames?: () => Iterable<string>;
  /** The service's own names (models): never taken for a secret or a slide, however they are set. */
  publicNames?: Iterable<string>;
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const wholeToken = (value: string) => new RegExp(`(?<!${TOKEN})${escapeRegExp(value)}(?!${TOKEN})`, 'g');

export class Anonymizer {
  private readonly fixed: [RegExp, string][];
  private readonly publicNames: Set<string>;

  constructor(private readonly sources: AnonymizerSources = {}) {
    const env = sources.env ?? process.env;
    this.publicNames = new Set(sources.publicNames ?? []);
    /** A value made of public names (MODELS=tissue-seg,gene-expr) reveals nothing. */
    const isPublic = (value: string) => value.split(',').every((part) => this.publicNames.has(part.trim()));
    const pairs: [string, string][] = [];
    for (const path of sources.installPaths ?? []) pairs.push([path.replace(/\/$/, ''), '<install>']);
    pairs.push([homedir(), '<home>']);
    pairs.push([hostname(), '<host>']);
    try {
      pairs.push([userInfo().username, '<user>']);
    } catch {
      // no passwd entry for this uid: nothing to hide
    }
    for (const name of ['USER', 'LOGNAME', 'HOSTNAME', 'HOME'])
      if (env[name]) pairs.push([env[name]!, `<${name.toLowerCase()}>`]);
    for (const [name, value] of Object.entries(env)) {
      if (value && !isGeneric(value) && (SECRET_NAME.test(name) || isCredentialShaped(value)))
        pairs.push([value, `<env:${name}>`]);
    }
    // Longest first, so a path is replaced before the user name inside it. Short values (a host
    // called "vm", a user called "root") only as whole words, so other words survive.
    this.fixed = pairs
      .filter(([v]) => v && v.length >= 2 && !isPublic(v))
      .sort((a, b) => b[0].length - a[0].length)
      .map(([v, label]) => [
        v.length < 6 ? new RegExp(`(?<!\\w)${escapeRegExp(v)}(?!\\w)`, 'g') : new RegExp(escapeRegExp(v), 'g'),
        label,
      ]);
  }

  /** Identity (host, user, paths, addresses, secrets): from any string, keys included. */
  private scrubIdentity(text: string): string {
    let out = text;
    for (const [secret, label] of this.fixed) out = out.replace(secret, label);
    return out
      .replace(MAC, '<mac>')
      .replace(IPV4, '<ip>')
      .replace(IPV6, (m) => (isIpv6(m) ? '<ip>' : m));
  }

  /** Slide names, as whole tokens of free text. A slide named like a model or made of digits is
   *  left alone: it would rewrite the service's own words and numbers, and identifies nobody. */
  private scrubSlides(text: string): string {
    let out = text;
    for (const slide of this.sources.slideNames?.() ?? []) {
      if (slide.length < 3 || this.publicNames.has(slide) || /^[\d.]+$/.test(slide) || !out.includes(slide)) continue;
      out = out.replace(wholeToken(slide), '<slide>');
    }
    return out;
  }

  scrubString(text: string): string {
    const out = this.scrubIdentity(text);
    return isFreeText(text) ? this.scrubSlides(out) : out;
  }

  /** A deep copy with every string value scrubbed; keys lose only identity (never a slide name). */
  scrub<T>(value: T): T {
    if (typeof value === 'string') return this.scrubString(value) as T;
    if (Array.isArray(value)) return value.map((v) => this.scrub(v)) as T;
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [this.scrubIdentity(k), this.scrub(v)])) as T;
    }
    return value;
  }
}
