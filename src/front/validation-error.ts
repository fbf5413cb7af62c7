// Maps JSON-schema (ajv) validation errors to FastAPI/pydantic's ValidationError items, so a
// client written against the spec's HTTPValidationError sees the shape and type names it expects.
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';
import type { FieldError } from '../ipc/protocol.js';

export interface ValidationItem extends FieldError {
  input?: unknown;
}

const LOC_ROOT: Record<string, string> = { body: 'body', querystring: 'query', params: 'path', headers: 'header' };

const TYPE_ERRORS: Record<string, [string, string]> = {
  integer: ['int_type', 'Input should be a valid integer'],
  number: ['float_type', 'Input should be a valid number'],
  string: ['string_type', 'Input should be a valid string'],
  array: ['list_type', 'Input should be a valid list'],
  boolean: ['bool_type', 'Input should be a valid boolean'],
  object: ['model_attributes_type', 'Input should be a valid dictionary or object to extract fields from'],
};

function segments(instancePath: string): (string | number)[] {
  if (!instancePath) return [];
  return instancePath
    .slice(1)
    .split('/')
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

function valueAt(data: unknown, path: (string | number)[]): unknown {
  let v: unknown = data;
  for (const key of path)
    v = v !== null && typeof v === 'object' ? (v as Record<string | number, unknown>)[key] : undefined;
  return v;
}

/** Echo small inputs as pydantic does; leave out objects and long strings (a tile is megabytes). */
function echo(value: unknown): { input?: unknown } {
  if (
    value === undefined ||
    (value !== null && typeof value === 'object') ||
    (typeof value === 'number' && !Number.isFinite(value))
  )
    return {};
  if (typeof value === 'string' && value.length > 200) return {};
  return { input: value };
}

const quoted = (values: unknown[]) =>
  values
    .map((v) => `'${String(v)}'`)
    .join(', ')
    .replace(/, ([^,]*)$/, ' or $1');

/** A query value is text: one that is not a number failed to parse, as pydantic names it. */
const PARSING_ERRORS: Record<string, [string, string]> = {
  integer: ['int_parsing', 'Input should be a valid integer, unable to parse string as an integer'],
  number: ['float_parsing', 'Input should be a valid number, unable to parse string as a number'],
};

function describe(error: FastifySchemaValidationError, value: unknown, root: string): Omit<FieldError, 'loc'> {
  const p = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return { type: 'missing', msg: 'Field required' };
    // image_data holds no decoded image: it was not a string (src/front/tile-image.ts).
    case 'tileImage':
      return { type: TYPE_ERRORS.string[0], msg: TYPE_ERRORS.string[1] };
    case 'type': {
      const wanted = String(p.type).split(',')[0];
      if (root === 'query' && typeof value === 'string' && PARSING_ERRORS[wanted]) {
        const [type, msg] = PARSING_ERRORS[wanted];
        return { type, msg };
      }
      // JSON.parse reads 1e400 as Infinity; ajv's number types are finite. Pydantic's name for it.
      if (typeof value === 'number' && !Number.isFinite(value)) {
        return {
          type: 'finite_number',
          msg: `Input should be a finite number; the number is out of range (beyond ${Number.MAX_VALUE.toPrecision(2)} in magnitude)`,
        };
      }
      if (wanted === 'integer' && typeof value === 'number')
        return { type: 'int_from_float', msg: 'Input should be a valid integer, got a number with a fractional part' };
      const [type, msg] = TYPE_ERRORS[wanted] ?? ['value_error', `Input should be of type ${wanted}`];
      return { type, msg };
    }
    case 'enum':
    case 'const': {
      return literal((p.allowedValues as unknown[]) ?? [p.allowedValue]);
    }
    case 'minimum':
      return {
        type: 'greater_than_equal',
        msg: `Input should be greater than or equal to ${p.limit}`,
        ctx: { ge: p.limit },
      };
    case 'maximum':
      return { type: 'less_than_equal', msg: `Input should be less than or equal to ${p.limit}`, ctx: { le: p.limit } };
    default:
      return { type: 'value_error', msg: `Value error, ${error.message ?? 'invalid value'}` };
  }
}

/** Items of one part at most: a bulk_rna of a million strings is a million errors, and listing
 *  them all took 13 s, 1 GB of a front and a 106 MB answer to a 4 MB request. */
export const MAX_ITEMS = 100;

/**
 * One item per failing field, the first MAX_ITEMS of them. A nullable field (anyOf [T, null])
 * reports only its non-null branch, as pydantic reports `Optional[T]`. `root` is where the data
 * was sent, when not the part validated (a binary tile's fields, validated as its body, come in
 * the query).
 */
export function toValidationItems(
  errors: FastifySchemaValidationError[],
  context: string,
  data: unknown,
  root = LOC_ROOT[context] ?? context,
): ValidationItem[] {
  // ajv's anyOf error points at ".../anyOf"; its branches' errors at ".../anyOf/<n>/...".
  const unions = errors
    .filter((e) => e.keyword === 'anyOf')
    .map((e) => `${e.schemaPath.replace(/\/anyOf$/, '')}/anyOf/`);
  const kept = errors.filter((e) => {
    if (e.keyword === 'anyOf') return false;
    const union = unions.find((u) => e.schemaPath.startsWith(u));
    return !union || e.schemaPath.startsWith(`${union}0/`);
  });
  const seen = new Set<string>();
  const items: ValidationItem[] = [];
  for (const error of kept) {
    if (items.length === MAX_ITEMS) break;
    const path = segments(error.instancePath);
    if (error.keyword === 'required') path.push(String((error.params as { missingProperty: string }).missingProperty));
    const value = error.keyword === 'required' ? undefined : valueAt(data, path);
    const item: ValidationItem = { loc: [root, ...path], ...describe(error, value, root), ...echo(value) };
    const key = JSON.stringify(item.loc) + item.type;
    if (seen.has(key)) continue;
    seen.add(key);
    items.push(item);
  }
  return items;
}

/** A value not among `allowed`, as pydantic's literal_error: "Input should be 'a' or 'b'". */
function literal(allowed: unknown[]) {
  const expected = quoted(allowed);
  return { msg: `Input should be ${expected}`, type: 'literal_error', ctx: { expected } };
}

/** A handler's own literal_error item at `loc` (`hint` follows the message). */
export function literalItem(loc: (string | number)[], allowed: unknown[], input: unknown, hint = ''): ValidationItem {
  const { msg, type, ctx } = literal(allowed);
  return { loc, msg: msg + hint, type, ctx, input };
}

/** A body fastify cannot even read as text (a malformed Content-Type): pydantic's answer for a
 *  body that is not an object. */
export function bodyNotObject(): ValidationItem {
  const [type, msg] = TYPE_ERRORS.object;
  return { loc: ['body'], msg, type };
}

/** Malformed JSON, in FastAPI's shape: loc ["body", character offset]. */
export function jsonInvalid(message: string): ValidationItem {
  const position = /position (\d+)/.exec(message);
  return {
    loc: position ? ['body', Number(position[1])] : ['body'],
    msg: 'JSON decode error',
    type: 'json_invalid',
    ctx: { error: message },
  };
}
