// A tool's input validator, built from its JSON Schema. zod's `fromJSONSchema` reads a subschema's
// constraints only through its `type`, ignores what sits beside a `$ref` (composition included)
// or beside an `enum`/`const` when the keyword is a constraint, enforces `required` only for names under
// `properties`, and `minItems`/`maxItems` only with `items`. The validator is built from an
// equivalent rewrite that zod enforces in full (the model is still shown the schema as given);
// what has no such rewrite, or could only recurse until the stack overflows, is refused. zod also
// compiles a `pattern` (and a `patternProperties` name) as `new RegExp(p)`, without the `u` flag that
// JSON Schema's Unicode semantics need (`\p{L}`, a `.` matching one astral character): the schema's
// own patterns get it while zod builds the validator (see {@link withUnicodePatterns}). What zod
// would skip without a word (draft-07's `dependencies`, `$dynamicRef`) is enforced or refused too.
import { z } from 'zod';
import { describeError } from '../seam/errors.js';
import { isRecord } from '../seam/parse.js';

type Schema = Record<string, unknown>;

/** Keywords that constrain a value only when the subschema names its `type`. */
const TYPED_KEYWORDS = [
  'properties', 'required', 'additionalProperties', 'patternProperties', 'propertyNames', 'minProperties', 'maxProperties',
  'items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems', 'contains', 'minContains', 'maxContains',
  'minLength', 'maxLength', 'pattern', 'format',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
];

/** A typeless subschema constrains every type its keywords name and lets the others pass. */
const ALL_TYPES = ['object', 'array', 'string', 'number', 'boolean', 'null'];
/** What a `$ref`'s or an `enum`'s siblings may hold without constraining anything. */
const ANNOTATIONS = new Set(['$schema', '$id', '$defs', 'definitions', '$comment', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly']);
const COMPOSITION = ['allOf', 'anyOf', 'oneOf', 'not'];

/** Keywords holding one subschema, and those holding a map or a list of them. */
const SCHEMA_KEYWORDS = ['additionalProperties', 'propertyNames', 'items', 'additionalItems', 'contains', 'not'];
const SCHEMA_MAP_KEYWORDS = ['properties', 'patternProperties', '$defs', 'definitions'];
const SCHEMA_LIST_KEYWORDS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'];
/** The references zod resolves: it reads `#/$defs/A/properties/b` as `#/$defs/A`. */
const SUPPORTED_REF = /^#(?:\/(?:\$defs|definitions)\/[^/]+)?$/;

/** Sets an own property, `__proto__` included (an assignment would call the inherited setter). */
function put(target: Schema, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

const hasType = (node: Schema, type: string) => node['type'] === type || (Array.isArray(node['type']) && node['type'].includes(type));

function matchesType(value: unknown, type: unknown): boolean {
  if (Array.isArray(type)) return type.some((one) => matchesType(value, one));
  if (type === 'integer') return Number.isInteger(value);
  if (type === 'null') return value === null;
  if (type === 'array') return Array.isArray(value);
  if (type === 'object') return isRecord(value);
  return typeof value === type;
}

/** `node` split into its annotations and an `allOf` of `first` and the rest, or `node` when the rest says nothing. */
function splitOff(node: Schema, first: Schema, path: string): Schema {
  const outer: Schema = {};
  const rest: Schema = {};
  for (const [key, value] of Object.entries(node)) if (key !== '$ref') put(ANNOTATIONS.has(key) ? outer : rest, key, value);
  put(outer, 'allOf', [first, rewriteNode(rest, path)]);
  return outer;
}

/** `required` names `properties` lacks, added with the schema their value must meet. */
function withRequired(node: Schema): Schema {
  const required = node['required'] as string[];
  const properties = (node['properties'] ?? {}) as Schema;
  const missing = required.filter((name) => !Object.hasOwn(properties, name));
  if (missing.length === 0) return node;
  const patterns = Object.keys((node['patternProperties'] ?? {}) as Schema).map((pattern) => new RegExp(pattern, 'u'));
  const additional = node['additionalProperties'] ?? {};
  const filled = { ...properties };
  for (const name of missing) put(filled, name, patterns.some((pattern) => pattern.test(name)) || additional === true ? {} : additional);
  return { ...node, properties: filled };
}

function rewriteNode(node: Schema, path: string): Schema {
  const ref = node['$ref'];
  const constrains = (key: string) => key === 'type' || key === 'enum' || key === 'const' || COMPOSITION.includes(key) || TYPED_KEYWORDS.includes(key);
  if (ref !== undefined) {
    if (typeof ref !== 'string' || !SUPPORTED_REF.test(ref)) throw new Error(`${path}.$ref must be "#", "#/$defs/<name>" or "#/definitions/<name>"`);
    return Object.keys(node).some(constrains) ? splitOff(node, { $ref: ref }, path) : node;
  }
  for (const keyword of ['enum', 'const'] as const) {
    if (!(keyword in node) || node[keyword] === undefined) continue;
    const values = keyword === 'enum' ? (Array.isArray(node['enum']) ? node['enum'] : []) : [node['const']];
    const typed = TYPED_KEYWORDS.some((key) => node[key] !== undefined);
    const mistyped = node['type'] !== undefined && values.some((value) => !matchesType(value, node['type']));
    if (typed || mistyped) {
      const { [keyword]: value, ...rest } = node;
      return splitOff(rest, { [keyword]: value }, path);
    }
    return node;
  }
  let out = node;
  if (out['type'] === undefined && TYPED_KEYWORDS.some((key) => out[key] !== undefined)) out = { ...out, type: ALL_TYPES };
  if (hasType(out, 'object')) {
    if (out['patternProperties'] !== undefined && isRecord(out['additionalProperties'])) {
      throw new Error(`${path} has additionalProperties beside patternProperties, which the validator would not enforce: make it true or false, or list the properties`);
    }
    if (out['required'] !== undefined) out = withRequired(out);
  }
  if (hasType(out, 'array') && out['items'] === undefined && out['prefixItems'] === undefined && (out['minItems'] !== undefined || out['maxItems'] !== undefined)) {
    out = { ...out, items: {} };
  }
  return out;
}

/** Keywords zod has no validator for, with what to write instead. */
const UNENFORCEABLE: [keyword: string, instead: string][] = [
  ['if', 'write the cases as an anyOf or oneOf of subschemas'],
  ['then', 'write the cases as an anyOf or oneOf of subschemas'],
  ['else', 'write the cases as an anyOf or oneOf of subschemas'],
  ['unevaluatedProperties', 'use additionalProperties, listing in properties the names its subschemas allow'],
  ['unevaluatedItems', 'use items (beside prefixItems)'],
  ['$dynamicRef', 'use $ref to "#", "#/$defs/<name>" or "#/definitions/<name>"'],
  ['$recursiveRef', 'use $ref to "#", "#/$defs/<name>" or "#/definitions/<name>"'],
];

function unenforceableProblem(node: Schema, path: string): string | undefined {
  for (const [keyword, instead] of UNENFORCEABLE) {
    if (node[keyword] !== undefined) return `${path} has ${keyword}, which the validator cannot enforce: ${instead}`;
  }
  // zod reads `not` only as `{ not: {} }`, which no value meets.
  const not = node['not'];
  if (not !== undefined && !(isRecord(not) && Object.keys(not).length === 0)) {
    return `${path} has not, which the validator cannot enforce (beyond { "not": {} }, which no value meets): list the values or types it allows instead`;
  }
  return undefined;
}

/**
 * `dependentRequired`, `dependentSchemas` and draft-07's `dependencies` (which zod would refuse or,
 * for `dependencies`, ignore) as what they mean: for each name, an object lacking it
 * (`properties: { name: false }`) or one meeting the names it requires or the schema it brings.
 */
function dependencyClauses(node: Schema, path: string, patterns: Set<string>, refs: Set<string>): Schema[] {
  const clauses: Schema[] = [];
  for (const keyword of ['dependentRequired', 'dependentSchemas', 'dependencies']) {
    const map = node[keyword];
    if (map === undefined) continue;
    if (!isRecord(map)) throw new Error(`${path}.${keyword} must be an object of ${keyword === 'dependentRequired' ? 'property name lists' : 'subschemas'}`);
    for (const [name, dependency] of Object.entries(map)) {
      const where = `${path}.${keyword}[${JSON.stringify(name)}]`;
      if (name === '__proto__') throw new Error(`${path}.${keyword} names a property __proto__, which the validator would not check: rename it`);
      let met: unknown;
      if (keyword !== 'dependentSchemas' && Array.isArray(dependency)) {
        if (!dependency.every((one) => typeof one === 'string')) throw new Error(`${where} must be an array of property names`);
        met = rewriteNode({ required: dependency }, where);
      } else if (keyword !== 'dependentRequired' && (isRecord(dependency) || typeof dependency === 'boolean')) {
        met = rewrite(dependency, where, patterns, refs);
      } else {
        throw new Error(`${where} must be ${keyword === 'dependentRequired' ? 'an array of property names' : keyword === 'dependentSchemas' ? 'a subschema' : 'an array of property names or a subschema'}`);
      }
      const absent: Schema = {};
      put(absent, name, false);
      clauses.push({ anyOf: [rewriteNode({ properties: absent }, where), met] });
    }
  }
  return clauses;
}

function shapeProblem(node: Schema, path: string): string | undefined {
  const unenforceable = unenforceableProblem(node, path);
  if (unenforceable) return unenforceable;
  const required = node['required'];
  if (required !== undefined && !(Array.isArray(required) && required.every((name) => typeof name === 'string'))) {
    return `${path}.required must be an array of property names`;
  }
  for (const keyword of SCHEMA_MAP_KEYWORDS) {
    if (node[keyword] !== undefined && !isRecord(node[keyword])) return `${path}.${keyword} must be an object of subschemas`;
  }
  // zod builds an object's shape by assignment, where a `__proto__` key sets no property: its check is lost.
  if ((isRecord(node['properties']) && Object.hasOwn(node['properties'], '__proto__')) || (Array.isArray(required) && required.includes('__proto__'))) {
    return `${path} names a property __proto__, which the validator would not check: rename it`;
  }
  // zod compares enum and const values by identity: an object or an array there matches no input.
  const values = Array.isArray(node['enum']) ? node['enum'] : [];
  if ([...values, node['const']].some((value) => typeof value === 'object' && value !== null)) {
    return `${path} has an object or an array in its enum or const, which the validator would match with no value: list strings, numbers, booleans or null, or describe the value with type and properties`;
  }
  return undefined;
}

/** `schema` (plain, acyclic JSON) rewritten so that zod enforces all it says; throws naming what cannot be. */
function rewrite(schema: unknown, path: string, patterns: Set<string>, refs: Set<string>, intersected = false): unknown {
  if (!isRecord(schema)) return schema;
  const problem = shapeProblem(schema, path);
  if (problem) throw new Error(problem);
  const node: Schema = { ...schema };
  // zod fills a missing value with its `default`, so a required property would pass absent.
  delete node['default'];
  // zod checks `uri-reference` as an absolute URL, refusing the relative references it allows.
  if (node['format'] === 'uri-reference') delete node['format'];
  if (typeof node['$ref'] === 'string') refs.add(node['$ref']);
  if (node['pattern'] !== undefined) patterns.add(unicodePattern(node['pattern'], `${path}.pattern`));
  for (const name of Object.keys(isRecord(node['patternProperties']) ? node['patternProperties'] : {})) patterns.add(unicodePattern(name, `${path}.patternProperties name`));
  for (const keyword of SCHEMA_KEYWORDS) if (isRecord(node[keyword])) node[keyword] = rewrite(node[keyword], `${path}.${keyword}`, patterns, refs);
  for (const keyword of SCHEMA_MAP_KEYWORDS) {
    if (!isRecord(node[keyword])) continue;
    const map: Schema = {};
    // A definition may be referenced beside other keywords: intersected.
    const defined = keyword === '$defs' || keyword === 'definitions';
    for (const [name, sub] of Object.entries(node[keyword])) put(map, name, rewrite(sub, `${path}.${keyword}[${JSON.stringify(name)}]`, patterns, refs, defined));
    node[keyword] = map;
  }
  for (const keyword of SCHEMA_LIST_KEYWORDS) {
    const list = node[keyword];
    if (Array.isArray(list)) node[keyword] = list.map((sub, index) => rewrite(sub, `${path}.${keyword}[${index}]`, patterns, refs, keyword === 'allOf'));
  }
  const dependencies = dependencyClauses(node, path, patterns, refs);
  delete node['dependentRequired'];
  delete node['dependentSchemas'];
  delete node['dependencies'];
  if (dependencies.length > 0) node['allOf'] = [...(Array.isArray(node['allOf']) ? node['allOf'] : []), ...dependencies];
  const composed = intersected || ['allOf', 'anyOf', 'oneOf', '$ref'].some((keyword) => node[keyword] !== undefined);
  return rewriteNode(composed ? namesAsPatterns(closedOverComposition(node, path, patterns), path, patterns) : node, path);
}

/**
 * zod checks a subschema beside the node's own (an `allOf`, `anyOf` or `oneOf`, a dependency, a
 * `$ref`), and the members of an `allOf` (a definition too, which a `$ref` may bring beside others),
 * as an intersection, which passes a name one side refuses when the other lets it through:
 * `additionalProperties: false` there would let every name pass. The names it forbids are written
 * as a `patternProperties` entry that no value meets instead, which an intersection keeps.
 */
function closedOverComposition(node: Schema, path: string, patterns: Set<string>): Schema {
  if (node['additionalProperties'] !== false || !(node['type'] === undefined || hasType(node, 'object'))) return node;
  if (node['patternProperties'] !== undefined) {
    throw new Error(`${path} has additionalProperties: false beside patternProperties and a subschema (allOf, anyOf, oneOf, a dependency or a $ref), which the validator would not enforce: list the properties`);
  }
  const names = Object.keys(isRecord(node['properties']) ? node['properties'] : {}).map(escapeName);
  const others = names.length === 0 ? '' : `^(?!(?:${names.join('|')})$)`;
  patterns.add(others);
  const open: Schema = { ...node, patternProperties: { [others]: false } };
  delete open['additionalProperties'];
  return open;
}

const escapeName = (name: string) => name.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');

/**
 * `propertyNames` where zod checks it in an intersection (see closedOverComposition), which drops it:
 * written as `patternProperties` entries no value meets, for the names its `pattern`, `enum` or
 * `const` refuses. Anything else it says is refused.
 */
function namesAsPatterns(node: Schema, path: string, patterns: Set<string>): Schema {
  const names = node['propertyNames'];
  if (names === undefined || names === true || !(node['type'] === undefined || hasType(node, 'object'))) return node;
  const where = `${path}.propertyNames`;
  const refused = (why: string) => new Error(`${where} beside allOf, anyOf, oneOf or a $ref, or in an allOf member or a definition, ${why}`);
  if (isRecord(node['additionalProperties'])) throw refused('is not enforced beside additionalProperties (a subschema): list the properties instead');
  const entries: string[] = [];
  if (names === false) entries.push('');
  else if (!isRecord(names) || Object.keys(names).some((key) => !['pattern', 'enum', 'const', 'type'].includes(key) && !ANNOTATIONS.has(key)) || !(names['type'] === undefined || hasType(names, 'string'))) {
    throw refused('is enforced only as a pattern, an enum or a const of names: write it so');
  } else {
    if (names['pattern'] !== undefined) entries.push(`^(?![\\s\\S]*?(?:${unicodePattern(names['pattern'], `${where}.pattern`)}))`);
    for (const keyword of ['enum', 'const']) {
      if (names[keyword] === undefined) continue;
      const listed = keyword === 'enum' ? names['enum'] : [names['const']];
      if (!Array.isArray(listed) || !listed.every((name) => typeof name === 'string')) throw refused(`has a ${keyword} of other than names (strings)`);
      entries.push(listed.length === 0 ? '' : `^(?!(?:${listed.map(escapeName).join('|')})$)`);
    }
  }
  const patternProperties: Schema = { ...(isRecord(node['patternProperties']) ? node['patternProperties'] : {}) };
  for (const entry of entries) {
    patterns.add(entry);
    put(patternProperties, entry, false);
  }
  const open: Schema = { ...node, patternProperties };
  delete open['propertyNames'];
  return open;
}

/** `pattern`, checked to be a regular expression with Unicode semantics (the `u` flag), as JSON Schema reads it. */
function unicodePattern(pattern: unknown, where: string): string {
  if (typeof pattern !== 'string') throw new Error(`${where} must be a string (a regular expression)`);
  try {
    new RegExp(pattern, 'u');
  } catch (error) {
    throw new Error(`${where} ${JSON.stringify(pattern)} is not a regular expression with Unicode semantics (${describeError(error)})`);
  }
  return pattern;
}

/**
 * What `build` returns, built while `new RegExp(p)` without flags gives `p` the `u` flag for each of
 * `patterns` (the schema's own). zod builds every pattern's RegExp during `fromJSONSchema`, which is
 * synchronous (a recursive `$ref` reads the converted schema later, never a pattern), and compiles
 * them as `new RegExp(p)`: no other code runs while the global is swapped, and it is put back after.
 */
function withUnicodePatterns<T>(patterns: ReadonlySet<string>, build: () => T): T {
  if (patterns.size === 0) return build();
  const native = globalThis.RegExp;
  globalThis.RegExp = new Proxy(native, {
    construct(target, args: unknown[], newTarget) {
      const [source, flags] = args;
      const unicode = typeof source === 'string' && flags === undefined && patterns.has(source);
      return Reflect.construct(target, unicode ? [source, 'u'] : args, newTarget) as object;
    },
  });
  try {
    return build();
  } finally {
    globalThis.RegExp = native;
  }
}

/** The `$ref`s a subschema checks the very value it is given against (not one of its parts). */
function inPlaceRefs(node: unknown, out: string[]): string[] {
  if (!isRecord(node)) return out;
  if (typeof node['$ref'] === 'string') out.push(node['$ref']);
  for (const keyword of COMPOSITION) {
    const sub = node[keyword];
    for (const item of Array.isArray(sub) ? sub : [sub]) inPlaceRefs(item, out);
  }
  return out;
}

function resolve(root: Schema, ref: string): unknown {
  if (ref === '#') return root;
  const [, keyword, name] = ref.split('/');
  const defs = root[keyword!];
  const key = name!.replaceAll('~1', '/').replaceAll('~0', '~');
  return isRecord(defs) && Object.hasOwn(defs, key) ? defs[key] : undefined;
}

/**
 * A `$ref` cycle that comes back to the same value without passing a property or an item (`{ $ref: "#" }`,
 * `A: { anyOf: [{ $ref: "#/$defs/A" }] }`) never ends: validating against it overflows the stack.
 * Walked without recursion, as a long chain of definitions must not overflow this check either.
 */
function refCycleProblem(root: Schema, path: string): string | undefined {
  const done = new Set<string>();
  const defs = (keyword: string) => Object.keys(isRecord(root[keyword]) ? root[keyword] : {}).map((name) => `#/${keyword}/${name.replaceAll('~', '~0').replaceAll('/', '~1')}`);
  // Every cycle passes the root or a definition: the only places a reference leads.
  const refs = ['#', ...defs('$defs'), ...defs('definitions')];
  for (const start of refs) {
    const onPath = new Set<string>();
    const stack: { ref: string; next: string[] }[] = [];
    const enter = (ref: string) => {
      onPath.add(ref);
      stack.push({ ref, next: inPlaceRefs(resolve(root, ref), []) });
    };
    if (done.has(start)) continue;
    enter(start);
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const ref = top.next.pop();
      if (ref === undefined) {
        stack.pop();
        onPath.delete(top.ref);
        done.add(top.ref);
      } else if (onPath.has(ref)) {
        return `${path} has a $ref cycle (${[...onPath, ref].join(' → ')}) that never reaches a property or an item, so no value could be checked against it`;
      } else if (!done.has(ref) && SUPPORTED_REF.test(ref)) {
        enter(ref);
      }
    }
  }
  return undefined;
}

/**
 * The validator of a value meeting `schema` (plain, acyclic JSON: checked before). Throws an
 * `Error` saying what in the schema cannot be enforced; the caller words it as its error code.
 */
export function compileJsonSchema(schema: unknown, path: string): z.ZodType {
  const patterns = new Set<string>();
  const refs = new Set<string>();
  const enforceable = rewrite(schema, path, patterns, refs);
  if (isRecord(enforceable)) {
    // zod looks a definition up as `defs[name]`: `#/$defs/constructor` would find Object's own and check nothing.
    for (const ref of refs) if (resolve(enforceable, ref) === undefined) throw new Error(`${path} has a $ref to ${ref}, which it does not define`);
    const cycle = refCycleProblem(enforceable, path);
    if (cycle) throw new Error(cycle);
  }
  // Without `$schema`, zod resolves only `#/$defs/…`; a schema of `definitions` is draft-07's.
  const drafted = isRecord(enforceable) && enforceable['$defs'] === undefined && enforceable['definitions'] !== undefined;
  return withUnicodePatterns(patterns, () => z.fromJSONSchema(enforceable as Parameters<typeof z.fromJSONSchema>[0], drafted ? { defaultTarget: 'draft-7' } : undefined));
}
