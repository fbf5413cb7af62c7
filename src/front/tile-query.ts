// A binary tile's fields, sent as query parameters of the JSON body's names: each converted by its
// type in the contract's TileRequest (integer, number, a list of numbers as comma-separated text),
// so the route validates them with the schema a JSON body's fields pass. A value that is not a
// number is left as text: the schema refuses it, and the error names it as FastAPI names a query
// value it cannot parse (int_parsing, float_parsing; validation-error.ts).
import { TileRequest } from '../contract/schemas.js';

type Kind = 'integer' | 'number' | 'numbers' | 'string';

interface FieldSchema {
  type?: string;
  description?: string;
  items?: FieldSchema;
  anyOf?: FieldSchema[];
}

/** The field's kind; a nullable field (anyOf [T, null]) by its T. */
function kindOf(schema: FieldSchema): Kind {
  const type = schema.anyOf?.find((s) => s.type !== 'null') ?? schema;
  if (type.type === 'array') return 'numbers';
  return type.type === 'integer' || type.type === 'number' ? type.type : 'string';
}

const FIELDS = Object.entries(TileRequest.properties as Record<string, FieldSchema>)
  .filter(([name]) => name !== 'image_data')
  .map(([name, schema]) => [name, kindOf(schema), schema.description ?? name] as const);

const INTEGER = /^[+-]?\d+$/;
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

const number = (text: string, pattern: RegExp) => (pattern.test(text) ? Number(text) : text);

function convert(text: string, kind: Kind): unknown {
  if (kind === 'integer') return number(text, INTEGER);
  if (kind === 'number') return number(text, NUMBER);
  if (kind === 'numbers') return text === '' ? [] : text.split(',').map((v) => number(v, NUMBER));
  return text;
}

/** The tile's fields from a parsed query string. A repeated parameter counts once, its last value
 *  (as FastAPI reads a scalar), except a list's, whose values are joined. */
export function tileFieldsFromQuery(query: Record<string, string | string[] | undefined>): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [name, kind] of FIELDS) {
    const value = query[name];
    if (value === undefined) continue;
    fields[name] = convert(Array.isArray(value) ? (kind === 'numbers' ? value.join(',') : value.at(-1)!) : value, kind);
  }
  return fields;
}

/** The query parameters of a binary body, for /docs, with an example request's values as text.
 *  Optional in the document (a JSON body needs none); those the contract requires say so. */
export function tileQueryParameters(example?: Record<string, unknown>): Record<string, object> {
  const required = new Set<string>(TileRequest.required);
  return Object.fromEntries(
    FIELDS.map(([name, kind, description]) => {
      const value = example?.[name];
      const text = kind === 'numbers' ? `${description}, comma-separated` : description;
      return [
        name,
        {
          type: kind === 'numbers' ? 'string' : kind,
          description: `${text}. For an image/png or application/octet-stream body${required.has(name) ? ', required' : ''}; a JSON body has it in the body`,
          ...(value !== undefined && value !== null && { examples: [Array.isArray(value) ? value.join(',') : value] }),
        },
      ];
    }),
  );
}
