import { readFileSync } from 'node:fs';

/** The service version, from package.json (the spec's service description version). */
export const SERVICE_VERSION: string = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
