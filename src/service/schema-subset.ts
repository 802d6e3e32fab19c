// What an output schema may say that its validator would not enforce. The capture tool's input is
// checked by a schema built with zod's `fromJSONSchema`, which reads a subschema's constraints only
// through its `type` (a `{ properties, required }` with no `type` accepts anything) and ignores the
// siblings of a `$ref`. A schema relying on either would hand back "valid" structured output that
// breaks it, so such a schema is refused at start instead.
import { isRecord } from '../seam/parse.js';
import { SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS, TYPED_KEYWORDS } from '../runtime/json-schema.js';

// A `required` that is no array of names, or a map keyword that is no object, is refused before
// (by compileJsonSchema, which the schema meets first).
function nodeProblem(node: Record<string, unknown>, path: string): string | undefined {
  const constraints = TYPED_KEYWORDS.filter((keyword) => node[keyword] !== undefined);
  if (constraints.length === 0) return undefined;
  if (node['$ref'] !== undefined) return `${path} has ${constraints.join(', ')} beside $ref, which are not enforced there: move them into the referenced schema`;
  if (node['type'] === undefined && node['enum'] === undefined && node['const'] === undefined) {
    return `${path} has ${constraints.join(', ')} but no type, so they would not be enforced: give it a type`;
  }
  return undefined;
}

/**
 * Why `schema` states a constraint the capture tool would not enforce (the first such place, by
 * JSON path from `path`), or undefined. `schema` is plain, acyclic JSON (checked before).
 */
export function unenforcedSchemaProblem(schema: unknown, path: string): string | undefined {
  if (!isRecord(schema)) return undefined;
  const problem = nodeProblem(schema, path);
  if (problem) return problem;
  for (const keyword of SCHEMA_KEYWORDS) {
    const found = isRecord(schema[keyword]) ? unenforcedSchemaProblem(schema[keyword], `${path}.${keyword}`) : undefined;
    if (found) return found;
  }
  for (const keyword of SCHEMA_MAP_KEYWORDS) {
    for (const [name, sub] of Object.entries(isRecord(schema[keyword]) ? schema[keyword] : {})) {
      const found = unenforcedSchemaProblem(sub, `${path}.${keyword}[${JSON.stringify(name)}]`);
      if (found) return found;
    }
  }
  for (const keyword of SCHEMA_LIST_KEYWORDS) {
    const list = schema[keyword];
    if (!Array.isArray(list)) continue;
    for (let index = 0; index < list.length; index++) {
      const found = unenforcedSchemaProblem(list[index], `${path}.${keyword}[${index}]`);
      if (found) return found;
    }
  }
  return undefined;
}
