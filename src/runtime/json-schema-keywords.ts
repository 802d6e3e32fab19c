// The vocabulary of JSON Schema as the tool-input validator (json-schema.ts) reads it: which
// keywords hold subschemas, which constrain only a typed value, and how a pattern is read.
import { describeError } from '../seam/errors.js';

export type Schema = Record<string, unknown>;

/** Keywords that constrain a value only when the subschema names its `type`. */
export const TYPED_KEYWORDS = [
  'properties', 'required', 'additionalProperties', 'patternProperties', 'propertyNames', 'minProperties', 'maxProperties',
  'items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems', 'contains', 'minContains', 'maxContains',
  'minLength', 'maxLength', 'pattern', 'format',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
];

/** A typeless subschema constrains every type its keywords name and lets the others pass. */
export const ALL_TYPES = ['object', 'array', 'string', 'number', 'boolean', 'null'];
/** What a `$ref`'s or an `enum`'s siblings may hold without constraining anything. */
export const ANNOTATIONS = new Set(['$schema', '$id', '$defs', 'definitions', '$comment', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly']);
export const COMPOSITION = ['allOf', 'anyOf', 'oneOf', 'not'];

/** Keywords holding one subschema, and those holding a map or a list of them. */
export const SCHEMA_KEYWORDS = ['additionalProperties', 'propertyNames', 'items', 'additionalItems', 'contains', 'not'];
export const SCHEMA_MAP_KEYWORDS = ['properties', 'patternProperties', '$defs', 'definitions'];
export const SCHEMA_LIST_KEYWORDS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'];
/** The references zod resolves: it reads `#/$defs/A/properties/b` as `#/$defs/A`. */
export const SUPPORTED_REF = /^#(?:\/(?:\$defs|definitions)\/[^/]+)?$/;

/** Sets an own property, `__proto__` included (an assignment would call the inherited setter). */
export function put(target: Schema, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export const hasType = (node: Schema, type: string) => node['type'] === type || (Array.isArray(node['type']) && node['type'].includes(type));

/** `pattern`, checked to be a regular expression with Unicode semantics (the `u` flag), as JSON Schema reads it. */
export function unicodePattern(pattern: unknown, where: string): string {
  if (typeof pattern !== 'string') throw new Error(`${where} must be a string (a regular expression)`);
  try {
    new RegExp(pattern, 'u');
  } catch (error) {
    throw new Error(`${where} ${JSON.stringify(pattern)} is not a regular expression with Unicode semantics (${describeError(error)})`);
  }
  return pattern;
}
