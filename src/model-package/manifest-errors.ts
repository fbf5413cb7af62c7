// TypeBox's errors as one readable line per manifest field: a wrong value of a closed set names
// the allowed values, and a value matching no alternative of a union says what the alternatives
// are, instead of one "must be equal to constant" per alternative.
import type { TSchema } from 'typebox';
import type { TLocalizedValidationError } from 'typebox/error';

const field = (instancePath: string) => instancePath.replace(/^\//, '').replaceAll('/', '.') || '(root)';

/** The schema at a JSON pointer such as "#/properties/preprocess/properties/mean". */
function schemaAt(root: TSchema, pointer: string): Record<string, any> | undefined {
  let node: any = root;
  for (const part of pointer.replace(/^#\/?/, '').split('/').filter(Boolean)) node = node?.[part];
  return node;
}

const quote = (v: unknown) => JSON.stringify(v);
const describe = (s: Record<string, any>): string =>
  s.description ?? (s.enum ? s.enum.map(quote).join(', ') : (s.type ?? 'a value'));

export function manifestErrors(
  schema: TSchema,
  value: unknown,
  errors: readonly TLocalizedValidationError[],
): string[] {
  const unions = errors.filter((e) => e.keyword === 'anyOf').map((e) => e.schemaPath);
  const lines: string[] = [];
  for (const e of errors) {
    // Errors inside an alternative of a failed union are summed up by the union's own line.
    if (unions.some((u) => e.schemaPath.startsWith(`${u}/anyOf/`))) continue;
    const got = schemaAt(value as TSchema, `#${e.instancePath}`);
    let message = e.message;
    if (e.keyword === 'enum')
      message = `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.map(quote).join(', ')} (got ${quote(got)})`;
    if (e.keyword === 'anyOf')
      message = `must be ${(schemaAt(schema, e.schemaPath)?.anyOf ?? []).map(describe).join(' or ')} (got ${quote(got)})`;
    lines.push(`${field(e.instancePath)}: ${message}`);
  }
  return lines;
}
