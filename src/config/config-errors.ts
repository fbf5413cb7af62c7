// TypeBox's validation errors as sentences a person acts on, each with its code: where (file and
// field), the value found, and what was expected, with a suggestion for a misspelled key or value.
import { closest, distance } from 'fastest-levenshtein';
import type { TSchema } from 'typebox';
import { Value } from 'typebox/value';
import type { CodesOf } from '../lib/errors.js';

/** The codes a refused configuration or listen address carries (src/lib/errors.ts). */
export type ConfigCode = CodesOf<'CONFIG'> | CodesOf<'LISTEN'>;
/** One thing wrong with the configuration: its code and one sentence. */
export interface ConfigProblem {
  code: ConfigCode;
  message: string;
}

type Schema = TSchema & Record<string, any>;

/** The closest candidate when it is a plausible misspelling (two edits, or a third of it). */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  if (candidates.length === 0) return undefined;
  const best = closest(word, candidates as string[]);
  return distance(word, best) <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

/** "models[0].gpus" from "/models/0/gpus". */
export const fieldName = (instancePath: string): string =>
  instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce((name, s) => (/^\d+$/.test(s) ? `${name}[${s}]` : name ? `${name}.${s}` : s), '');

const range = (s: Schema) =>
  s.minimum !== undefined && s.maximum !== undefined
    ? ` from ${s.minimum} to ${s.maximum}`
    : s.minimum !== undefined
      ? ` >= ${s.minimum}`
      : s.maximum !== undefined
        ? ` <= ${s.maximum}`
        : '';

/** What a schema accepts, in words: its own `expected` annotation (where a pattern would say
 *  nothing to a person), or one built from its keywords. */
export function expected(s: Schema): string {
  if (typeof s.expected === 'string') return s.expected;
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (s.anyOf) return (s.anyOf as Schema[]).map(expected).join(' or ');
  switch (s.type) {
    case 'integer':
      return `an integer${range(s)}`;
    case 'number':
      return `a number${range(s)}`;
    case 'string':
      return s.pattern ? `a string matching ${s.pattern}` : s.minLength ? 'a non-empty string' : 'a string';
    case 'boolean':
      return 'true or false';
    case 'null':
      return 'null';
    case 'array':
      return `a list${s.minItems ? ` of at least ${s.minItems}` : ''} (each ${expected(s.items)})`;
    case 'object':
      return 'an object';
    default:
      return 'a valid value';
  }
}

const literals = (s: Schema): string[] =>
  (s.anyOf ?? []).filter((b: Schema) => typeof b.const === 'string').map((b: Schema) => b.const);

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

const problem = (code: ConfigCode, message: string): ConfigProblem => ({ code, message });

/**
 * One problem (its code and a sentence) per wrong field of `value`. `where(path)` names the field for a person (the file
 * and field, or the environment variable it came from). Objects and lists are walked here rather
 * than read from Value.Errors, which drops the errors after a failed union.
 */
export function describeErrors(
  schema: TSchema,
  value: unknown,
  where: (path: string) => string,
  path = '',
): ConfigProblem[] {
  const s = schema as Schema;
  if (s.type === 'object' && isPlainObject(value)) {
    const known = Object.keys(s.properties ?? {});
    const unknown = s.additionalProperties === false ? Object.keys(value).filter((key) => !known.includes(key)) : [];
    return [
      ...unknown.map((key) => {
        const hint = suggest(key, known);
        return problem(
          'TILE_ERR_CONFIG_UNKNOWN_KEY',
          `${where(`${path}/${key}`)} is not a setting (${hint ? `did you mean ${hint}?` : `settings here: ${known.join(', ')}`})`,
        );
      }),
      ...((s.required ?? []) as string[])
        .filter((key) => value[key] === undefined)
        .map((key) => problem('TILE_ERR_CONFIG_MISSING_KEY', `${where(`${path}/${key}`)} is missing (required)`)),
      ...known
        .filter((key) => value[key] !== undefined)
        .flatMap((key) => describeErrors(s.properties[key], value[key], where, `${path}/${key}`)),
    ];
  }
  if (s.type === 'array' && Array.isArray(value))
    return value.flatMap((item, i) => describeErrors(s.items, item, where, `${path}/${i}`));
  // A list where the only list a union takes has a wrong entry: name the entry ("gpus[1] is
  // \"999x\""), not the whole union. A list wrong as a whole (too short, repeated entries) falls
  // through to the union's sentence.
  const lists = ((s.anyOf ?? []) as Schema[]).filter((b) => b.type === 'array');
  if (lists.length === 1 && Array.isArray(value) && !Value.Check(schema, value)) {
    const entries = (value as unknown[]).flatMap((item, i) =>
      describeErrors(lists[0].items, item, where, `${path}/${i}`),
    );
    if (entries.length) return entries;
  }
  if (Value.Check(schema, value)) return [];
  const hint = typeof value === 'string' ? suggest(value, literals(s)) : undefined;
  return [
    problem(
      'TILE_ERR_CONFIG_VALUE',
      `${where(path)} is ${JSON.stringify(value)}, expected ${expected(s)}${hint ? ` (did you mean "${hint}"?)` : ''}`,
    ),
  ];
}
