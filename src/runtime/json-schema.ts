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
import { isRecord } from '../seam/parse.js';
import { ALL_TYPES, ANNOTATIONS, COMPOSITION, SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS, SUPPORTED_REF, TYPED_KEYWORDS, hasType, put, unicodePattern, type Schema } from './json-schema-keywords.js';
import { closedOverComposition, definitionsInIntersection, namesAsPatterns } from './json-schema-intersections.js';

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

/**
 * How zod checks a subschema: on its own (false), as a member of an intersection (an `allOf` member,
 * inline), or as a definition a `$ref` brings into one.
 */
type Intersected = false | 'member' | 'defined';

/**
 * `schema` (plain, acyclic JSON) rewritten so that zod enforces all it says; throws naming what cannot be.
 * `intersected`: see Intersected. `definedInIntersection`: the root's definitions (`$defs/name`) some
 * `$ref` brings into an intersection (see definitionsInIntersection); the others are checked on their own.
 */
function rewrite(schema: unknown, path: string, patterns: Set<string>, refs: Set<string>, intersected: Intersected = false, definedInIntersection: ReadonlySet<string> = new Set()): unknown {
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
    // A definition a $ref brings beside other keywords (or into an allOf) is intersected.
    const defined = keyword === '$defs' || keyword === 'definitions';
    for (const [name, sub] of Object.entries(node[keyword])) {
      const inIntersection = defined && definedInIntersection.has(`${keyword}/${name}`) ? 'defined' : false;
      put(map, name, rewrite(sub, `${path}.${keyword}[${JSON.stringify(name)}]`, patterns, refs, inIntersection));
    }
    node[keyword] = map;
  }
  for (const keyword of SCHEMA_LIST_KEYWORDS) {
    const list = node[keyword];
    if (Array.isArray(list)) node[keyword] = list.map((sub, index) => rewrite(sub, `${path}.${keyword}[${index}]`, patterns, refs, keyword === 'allOf' ? 'member' : false));
  }
  const dependencies = dependencyClauses(node, path, patterns, refs);
  delete node['dependentRequired'];
  delete node['dependentSchemas'];
  delete node['dependencies'];
  if (dependencies.length > 0) node['allOf'] = [...(Array.isArray(node['allOf']) ? node['allOf'] : []), ...dependencies];
  const composed = ['allOf', 'anyOf', 'oneOf', '$ref'].some((keyword) => node[keyword] !== undefined);
  if (!composed && !intersected) return rewriteNode(node, path);
  // An inline allOf member of its own is checked with its patternProperties, additionalProperties: false included.
  const closed = !composed && intersected === 'member' && node['patternProperties'] !== undefined ? node : closedOverComposition(node, path, patterns);
  return rewriteNode(namesAsPatterns(closed, path, patterns), path);
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
  const enforceable = rewrite(schema, path, patterns, refs, false, definitionsInIntersection(schema));
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
