import { readFileSync } from 'node:fs';

/** The service's package.json: its version (the spec's service description version) and the
 *  direct dependencies that /diagnostics reports. */
export const SERVICE_PACKAGE: { version: string; dependencies: Record<string, string> } = JSON.parse(
  readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'),
);
export const SERVICE_VERSION = SERVICE_PACKAGE.version;
