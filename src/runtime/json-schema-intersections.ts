// Where zod checks subschemas as an intersection (a node beside `allOf`/`anyOf`/`oneOf`/`$ref`, an
// `allOf` member, a definition a `$ref` brings into one), it drops a key one side refuses and the
// other lets through. What would be dropped there is rewritten into what an intersection keeps.
import { isRecord } from '../seam/parse.js';
import { ANNOTATIONS, SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS, SUPPORTED_REF, hasType, put, unicodePattern, type Schema } from './json-schema-keywords.js';

/**
 * zod checks a subschema beside the node's own (an `allOf`, `anyOf` or `oneOf`, a dependency, a
 * `$ref`), and the members of an `allOf` (a definition too, which a `$ref` may bring beside others),
 * as an intersection, which passes a name one side refuses when the other lets it through:
 * `additionalProperties: false` there would let every name pass. The names it forbids are written
 * as a `patternProperties` entry that no value meets instead, which an intersection keeps.
 */
export function closedOverComposition(node: Schema, path: string, patterns: Set<string>): Schema {
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

/**
 * The root's definitions (`$defs/name`, `definitions/name`) that zod checks in an intersection: a
 * `$ref` to them beside other keywords than annotations (split off into an `allOf`), in an `allOf`
 * member, or in a definition that is itself so checked. A definition only referenced alone is
 * checked on its own, as before any rewrite.
 */
export function definitionsInIntersection(root: unknown): Set<string> {
  const found = new Set<string>();
  if (!isRecord(root)) return found;
  const visit = (node: unknown, intersected: boolean): void => {
    if (!isRecord(node)) return;
    const ref = node['$ref'];
    if (typeof ref === 'string' && SUPPORTED_REF.test(ref) && ref !== '#') {
      if (intersected || Object.keys(node).some((key) => key !== '$ref' && !ANNOTATIONS.has(key))) {
        const [, keyword, name] = ref.split('/');
        found.add(`${keyword!}/${name!.replaceAll('~1', '/').replaceAll('~0', '~')}`);
      }
    }
    for (const keyword of SCHEMA_LIST_KEYWORDS) {
      const list = node[keyword];
      if (Array.isArray(list)) for (const sub of list) visit(sub, keyword === 'allOf');
    }
    for (const keyword of SCHEMA_KEYWORDS) visit(node[keyword], false);
    for (const keyword of [...SCHEMA_MAP_KEYWORDS, 'dependentSchemas', 'dependencies']) {
      // The root's own definitions are walked below, as their references bring them.
      if (node === root && (keyword === '$defs' || keyword === 'definitions')) continue;
      const map = node[keyword];
      if (isRecord(map)) for (const sub of Object.values(map)) visit(sub, false);
    }
  };
  visit(root, false);
  const definitions: [string, unknown][] = [];
  for (const keyword of ['$defs', 'definitions']) {
    if (isRecord(root[keyword])) for (const [name, sub] of Object.entries(root[keyword])) definitions.push([`${keyword}/${name}`, sub]);
  }
  // Each definition is walked as checked on its own, then again once some $ref brings it into an intersection.
  const walked = new Map<string, boolean>();
  for (let changed = true; changed; ) {
    changed = false;
    for (const [key, sub] of definitions) {
      const intersected = found.has(key);
      if (walked.get(key) === intersected) continue;
      walked.set(key, intersected);
      visit(sub, intersected);
      changed = true;
    }
  }
  return found;
}

const escapeName = (name: string) => name.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');

/**
 * `propertyNames` where zod checks it in an intersection (see closedOverComposition), which drops it:
 * written as `patternProperties` entries no value meets, for the names its `pattern`, `enum` or
 * `const` refuses. Anything else it says is refused.
 */
export function namesAsPatterns(node: Schema, path: string, patterns: Set<string>): Schema {
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
