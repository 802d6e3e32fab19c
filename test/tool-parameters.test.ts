// Tool parameters as JSON Schema: what the input validator enforces, and the schemas it refuses
// at registration because validating against them could not work.
import { describe, expect, it } from 'vitest';
import type { Tool } from 'subagent-host';
import { ToolRegistry } from 'subagent-host/internals';

const tool = (parameters: Record<string, unknown>): Tool => ({ name: 't', description: 'x', parameters, execute: async () => 'ran' });

describe('tool parameters', () => {
  it.each([
    ['a root $ref to itself', { type: 'object', $ref: '#' }],
    ['an allOf of the root', { type: 'object', allOf: [{ $ref: '#' }] }],
    ['definitions referring to each other in place', { type: 'object', properties: { a: { $ref: '#/$defs/A' } }, $defs: { A: { $ref: '#/$defs/B' }, B: { anyOf: [{ $ref: '#/$defs/A' }] } } }],
  ])('refuses %s (a $ref cycle reaching no property or item) with INVALID_OPTIONS at registration', (_label, parameters) => {
    const root = new ToolRegistry();
    expect(() => root.register(tool(parameters))).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('$ref cycle') }));
    expect(root.get('t')).toBeUndefined();
  });

  it.each([
    ['a string schema', { type: 'string' }],
    ['an empty schema', {}],
    ['an object schema without its type', { properties: { n: { type: 'number' } } }],
    ['a list of types', { type: ['object', 'null'] }],
  ])('refuses %s as parameters with INVALID_OPTIONS: a model sends one JSON object', (_label, parameters) => {
    const root = new ToolRegistry();
    expect(() => root.register(tool(parameters))).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining("parameters must be an object schema ({ type: 'object'") }));
    expect(root.get('t')).toBeUndefined();
  });

  it('validates a recursive schema whose cycle passes a property', async () => {
    const root = new ToolRegistry();
    root.register(tool({ type: 'object', properties: { n: { type: 'number' }, child: { $ref: '#' } } }));
    await expect(root.execute('t', { child: { child: { n: 'x' } } }, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    await expect(root.execute('t', { child: { child: { n: 1 } } }, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });

  it.each([
    ['properties and required without a type', { type: 'object', properties: { o: { properties: { n: { type: 'number' } }, required: ['n'] } } }, { o: {} }, { o: { n: 1 } }],
    ['a constraint beside a $ref', { type: 'object', properties: { n: { $ref: '#/$defs/N', maximum: 3 } }, $defs: { N: { type: 'number' } } }, { n: 4 }, { n: 3 }],
    ['an allOf beside a $ref', { type: 'object', properties: { n: { $ref: '#/$defs/N', allOf: [{ type: 'integer' }] } }, $defs: { N: { type: 'number', maximum: 3 } } }, { n: 4 }, { n: 3 }],
    ['a required name properties does not list', { type: 'object', required: ['n'] }, {}, { n: null }],
    ['minItems without items', { type: 'object', properties: { l: { type: 'array', minItems: 1 } } }, { l: [] }, { l: [1] }],
    ['a minimum beside an enum', { type: 'object', properties: { n: { type: 'number', enum: [1, 2, 3], minimum: 2 } } }, { n: 1 }, { n: 2 }],
    ['a type an enum value breaks', { type: 'object', properties: { s: { type: 'string', enum: ['a', 1] } } }, { s: 1 }, { s: 'a' }],
    ['definitions without $schema', { type: 'object', properties: { a: { $ref: '#/definitions/A' } }, definitions: { A: { type: 'string' } } }, { a: 1 }, { a: 'x' }],
    ['an integer type a fractional enum value breaks', { type: 'object', properties: { n: { type: 'integer', enum: [1, 1.5] } } }, { n: 1.5 }, { n: 1 }],
    ['an integer type a fractional const breaks, beside one that keeps it', { type: 'object', properties: { n: { type: 'integer', const: 2.5 }, m: { type: 'integer', const: 2 } } }, { n: 2.5, m: 2 }, { m: 2 }],
  ])('enforces %s', async (_label, parameters, bad, good) => {
    const root = new ToolRegistry();
    root.register(tool(parameters));
    await expect(root.execute('t', bad, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    await expect(root.execute('t', good, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });

  it('lets a typeless subschema pass values of the types its keywords do not constrain', async () => {
    const root = new ToolRegistry();
    root.register(tool({ type: 'object', properties: { v: { minLength: 2, required: ['k'] } } }));
    await expect(root.execute('t', { v: 5 }, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
    await expect(root.execute('t', { v: 'a' }, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
  });

  it('shows the model the parameters as registered', () => {
    const root = new ToolRegistry();
    const parameters = { type: 'object', properties: { n: { $ref: '#/$defs/N', maximum: 3 } }, $defs: { N: { type: 'number' } } };
    root.register(tool(parameters));
    expect(root.schemas()[0]!.parameters).toEqual(parameters);
  });

  it.each([
    ['a $ref into a definition', { type: 'object', properties: { a: { $ref: '#/$defs/A/properties/b' } }, $defs: { A: { type: 'object', properties: { b: { type: 'string' } } } } }],
    ['an additionalProperties schema beside patternProperties', { type: 'object', patternProperties: { '^a': { type: 'string' } }, additionalProperties: { type: 'number' } }],
    ['a required that is no array', { type: 'object', properties: { name: { type: 'string' } }, required: 'name' }],
  ])('refuses %s, which the validator would not enforce, with INVALID_OPTIONS', (_label, parameters) => {
    const root = new ToolRegistry();
    expect(() => root.register(tool(parameters))).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }));
  });

  // JSON Schema reads a pattern as an ECMA-262 regular expression with Unicode semantics (the `u` flag).
  it.each([
    ['a pattern with a Unicode property escape', { type: 'object', properties: { s: { type: 'string', pattern: '^\\p{L}+$' } } }, { s: 'ab1' }, { s: 'Zoë' }],
    ['a pattern whose dot matches one character beyond the BMP', { type: 'object', properties: { s: { type: 'string', pattern: '^.$' } } }, { s: 'ab' }, { s: '😀' }],
    ['a pattern of a typeless property', { type: 'object', properties: { s: { pattern: '^\\u{1F600}$' } } }, { s: 'x' }, { s: '😀' }],
    ['a patternProperties name with a Unicode property escape', { type: 'object', patternProperties: { '^\\p{Lu}': { type: 'number' } }, additionalProperties: false }, { Ä: 'x' }, { Ä: 1 }],
    ['two patternProperties names meaning one pattern', { type: 'object', patternProperties: { '^\\u{61}': { type: 'string' }, '^a': { maxLength: 1 } } }, { ab: 5 }, { ab: 'x' }],
    ['a required name a Unicode patternProperties name covers', { type: 'object', required: ['Ä'], patternProperties: { '^\\p{Lu}$': { type: 'number' } }, additionalProperties: false }, { Ä: 'x' }, { Ä: 1 }],
  ])('enforces %s with Unicode semantics', async (_label, parameters, bad, good) => {
    const root = new ToolRegistry();
    root.register(tool(parameters));
    await expect(root.execute('t', bad, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    await expect(root.execute('t', good, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });

  it('names a failed pattern as the schema gives it, read with the u flag', async () => {
    const root = new ToolRegistry();
    root.register(tool({ type: 'object', properties: { a: { type: 'string', pattern: '^\\p{L}+$' }, b: { type: 'string', pattern: '^[0-9]+$' } } }));
    await expect(root.execute('t', { a: 'Zoë', b: 'x' }, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT', message: expect.stringContaining('t input.b: Invalid string: must match pattern /^[0-9]+$/') });
    await expect(root.execute('t', { a: 'Zoë1', b: '1' }, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT', message: expect.stringContaining('t input.a: Invalid string: must match pattern /^\\p{L}+$/u (') });
  });

  it.each([
    ['a pattern that is no regular expression with Unicode semantics', { type: 'object', properties: { s: { type: 'string', pattern: '\\a' } } }, 'parameters.properties["s"].pattern "\\\\a" is not a regular expression with Unicode semantics'],
    ['a patternProperties name that is no regular expression with Unicode semantics', { type: 'object', patternProperties: { '[a-z': { type: 'string' } } }, 'parameters.patternProperties name "[a-z" is not a regular expression with Unicode semantics'],
    ['a pattern that is no string', { type: 'object', properties: { s: { type: 'string', pattern: 5 } } }, 'parameters.properties["s"].pattern must be a string'],
    // zod compares enum and const values by identity, builds shapes by assignment and looks definitions up unguarded.
    ['a const that is an object, which no input would match', { type: 'object', properties: { a: { const: { x: 1 } } } }, 'parameters.properties["a"] has an object or an array in its enum or const'],
    ['an enum holding an array, which no input would match', { type: 'object', properties: { a: { enum: ['x', [1]] } } }, 'parameters.properties["a"] has an object or an array in its enum or const'],
    ['a property named __proto__, which would go unchecked', JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}},"required":["__proto__"]}') as Record<string, unknown>, 'parameters names a property __proto__'],
    ['a required name __proto__, which would go unchecked', { type: 'object', required: ['__proto__'], additionalProperties: { type: 'string' } }, 'parameters names a property __proto__'],
    ['a $ref to a definition named like an Object method, which would check nothing', { type: 'object', properties: { a: { $ref: '#/$defs/toString' } } }, 'parameters has a $ref to #/$defs/toString, which it does not define'],
    // Beside definitions that exist, a name they inherit is still no definition of theirs.
    ...['toString', 'constructor', 'hasOwnProperty', '__proto__'].flatMap((name) => [
      [`a $ref to $defs/${name} beside other definitions`, { type: 'object', properties: { a: { $ref: `#/$defs/${name}` } }, $defs: { A: { type: 'string' } } }, `parameters has a $ref to #/$defs/${name}, which it does not define`],
      [`a $ref to definitions/${name} beside other definitions`, { type: 'object', properties: { a: { $ref: `#/definitions/${name}` } }, definitions: { A: { type: 'string' } } }, `parameters has a $ref to #/definitions/${name}, which it does not define`],
    ] as [string, Record<string, unknown>, string][]),
  ])('refuses %s with INVALID_OPTIONS naming it', (_label, parameters, message) => {
    const root = new ToolRegistry();
    expect(() => root.register(tool(parameters))).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining(message) }));
    expect(root.get('t')).toBeUndefined();
  });

  // Each keyword of JSON Schema (2020-12, and draft-07's as zod-to-json-schema and pydantic emit them) is
  // enforced or refused at registration: none is taken and then left unchecked.
  it.each([
    ['dependentRequired', { type: 'object', dependentRequired: { a: ['b'] } }, { a: 1 }, { a: 1, b: 2 }],
    ['dependentSchemas', { type: 'object', dependentSchemas: { a: { properties: { b: { type: 'string' } }, required: ['b'] } } }, { a: 1, b: 2 }, { a: 1, b: 'x' }],
    ["draft-07's dependencies naming properties", { type: 'object', dependencies: { a: ['b'] } }, { a: 1 }, { a: 1, b: 2 }],
    ["draft-07's dependencies holding a subschema", { type: 'object', dependencies: { a: { required: ['b'] } } }, { a: 1 }, { a: 1, b: 2 }],
    ['dependentRequired in a typeless subschema beside a $ref', { type: 'object', properties: { o: { $ref: '#/$defs/O', dependentRequired: { a: ['b'] } } }, $defs: { O: { type: 'object' } } }, { o: { a: 1 } }, { o: { b: 1 } }],
    ['dependentSchemas false, which forbids the property', { type: 'object', dependentSchemas: { a: false } }, { a: 1 }, { b: 1 }],
    ['a required property that has a default', { type: 'object', properties: { a: { type: 'string', default: 'x' } }, required: ['a'] }, {}, { a: 'y' }],
    ['a required property that has a default in a definition', { type: 'object', properties: { o: { $ref: '#/$defs/O' } }, $defs: { O: { type: 'object', properties: { a: { type: 'number', default: 1 } }, required: ['a'] } } }, { o: {} }, { o: { a: 2 } }],
    ['format email', { type: 'object', properties: { s: { type: 'string', format: 'email' } } }, { s: 'nope' }, { s: 'a@b.co' }],
    // zod checks what sits beside an object's own keywords as an intersection, which lets a name through that either side allows.
    ['additionalProperties false beside dependentRequired', { type: 'object', properties: { a: {}, b: {} }, additionalProperties: false, dependentRequired: { a: ['b'] } }, { b: 1, c: 1 }, { a: 1, b: 2 }],
    ["additionalProperties false beside draft-07's dependencies", { type: 'object', properties: { a: {}, 'b.c': {} }, additionalProperties: false, dependencies: { a: ['b.c'] } }, { a: 1, 'b.c': 1, bxc: 1 }, { a: 1, 'b.c': 2 }],
    ['additionalProperties false beside anyOf', { type: 'object', properties: { a: {}, b: {} }, additionalProperties: false, anyOf: [{ required: ['a'] }, { required: ['b'] }] }, { a: 1, c: 1 }, { b: 1 }],
    ['additionalProperties false beside a $ref', { type: 'object', properties: { o: { $ref: '#/$defs/O', properties: { a: {} }, additionalProperties: false } }, $defs: { O: { type: 'object' } } }, { o: { a: 1, c: 1 } }, { o: { a: 1 } }],
    // An allOf member, and a definition a $ref brings beside other keywords, are intersected too.
    ['additionalProperties false in an allOf member', { type: 'object', allOf: [{ properties: { a: {} }, additionalProperties: false }, { required: ['a'] }] }, { a: 1, c: 1 }, { a: 1 }],
    ['additionalProperties false in a definition a $ref brings beside required', { type: 'object', properties: { o: { $ref: '#/$defs/O', required: ['a'] } }, $defs: { O: { type: 'object', properties: { a: {} }, additionalProperties: false } } }, { o: { a: 1, c: 1 } }, { o: { a: 1 } }],
    ['propertyNames as a pattern beside allOf', { type: 'object', propertyNames: { pattern: '^[a-z]+$' }, allOf: [{ properties: { a: {} } }] }, { a: 1, B: 1 }, { a: 1, bc: 2 }],
    ['propertyNames as an unanchored pattern beside anyOf', { type: 'object', propertyNames: { pattern: 'id' }, anyOf: [{ type: 'object' }] }, { name: 1 }, { user_id: 1 }],
    ['propertyNames as an enum beside a $ref', { type: 'object', properties: { o: { $ref: '#/$defs/O', propertyNames: { enum: ['a.b', 'c'] } } }, $defs: { O: { type: 'object' } } }, { o: { axb: 1 } }, { o: { 'a.b': 1, c: 2 } }],
    ['propertyNames as a Unicode pattern in an allOf member', { type: 'object', allOf: [{ propertyNames: { pattern: '^\\p{L}+$' } }, { properties: { x: {} } }] }, { Z1: 1 }, { Zoë: 1 }],
    ['propertyNames false beside oneOf', { type: 'object', propertyNames: false, oneOf: [{ type: 'object' }] }, { a: 1 }, {}],
    // Only where zod intersects: a definition a $ref brings alone, and an allOf member's own patternProperties, are checked as written.
    ['additionalProperties false beside patternProperties in a definition a $ref brings alone', { type: 'object', properties: { o: { $ref: '#/$defs/O' } }, $defs: { O: { type: 'object', patternProperties: { '^x': {} }, additionalProperties: false } } }, { o: { y: 1 } }, { o: { x1: 1 } }],
    ['propertyNames maxLength in a definition a $ref brings alone', { type: 'object', properties: { o: { $ref: '#/$defs/O' } }, $defs: { O: { type: 'object', propertyNames: { maxLength: 3 }, additionalProperties: { type: 'number' } } } }, { o: { abcd: 1 } }, { o: { abc: 1 } }],
    ['additionalProperties false beside patternProperties in an allOf member', { type: 'object', allOf: [{ properties: { a: {} }, patternProperties: { '^x': {} }, additionalProperties: false }, { properties: { c: {} } }] }, { a: 1, c: 1 }, { a: 1, x1: 1 }],
  ])('enforces %s', async (_label, parameters, bad, good) => {
    const root = new ToolRegistry();
    root.register(tool(parameters));
    await expect(root.execute('t', bad, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT' });
    await expect(root.execute('t', good, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });

  it.each([
    ['dependentRequired on a value that is no object', { type: 'object', properties: { o: { dependentRequired: { a: ['b'] } } } }, { o: 5 }],
    ['a relative reference as format uri-reference', { type: 'object', properties: { s: { type: 'string', format: 'uri-reference' } } }, { s: '../a/b#c' }],
    ['a string format names no check for', { type: 'object', properties: { s: { type: 'string', format: 'regex', contentEncoding: 'base64' } } }, { s: '[' }],
  ])('accepts %s', async (_label, parameters, value) => {
    const root = new ToolRegistry();
    root.register(tool(parameters));
    await expect(root.execute('t', value, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });

  it.each([
    ['if/then/else', { type: 'object', if: { required: ['a'] }, then: { required: ['b'] } }, 'parameters has if, which the validator cannot enforce: write the cases as an anyOf or oneOf'],
    ['a then without if', { type: 'object', properties: { o: { then: { required: ['b'] } } } }, 'parameters.properties["o"] has then, which the validator cannot enforce'],
    ['if in a definition', { type: 'object', $defs: { A: { if: {}, else: false } } }, 'parameters.$defs["A"] has if'],
    ['unevaluatedProperties', { type: 'object', allOf: [{ properties: { a: {} } }], unevaluatedProperties: false }, 'parameters has unevaluatedProperties, which the validator cannot enforce: use additionalProperties'],
    ['unevaluatedItems', { type: 'object', properties: { l: { type: 'array', prefixItems: [{}], unevaluatedItems: false } } }, 'parameters.properties["l"] has unevaluatedItems, which the validator cannot enforce: use items'],
    ['not', { type: 'object', properties: { s: { not: { type: 'string' } } } }, 'parameters.properties["s"] has not, which the validator cannot enforce'],
    ['$dynamicRef', { type: 'object', properties: { s: { $dynamicRef: '#/$defs/S' } }, $defs: { S: { type: 'string' } } }, 'parameters.properties["s"] has $dynamicRef, which the validator cannot enforce: use $ref'],
    ['$recursiveRef', { type: 'object', properties: { s: { $recursiveRef: '#' } } }, 'parameters.properties["s"] has $recursiveRef, which the validator cannot enforce: use $ref'],
    ['a dependentRequired that lists no names', { type: 'object', dependentRequired: { a: 'b' } }, 'parameters.dependentRequired["a"] must be an array of property names'],
    ['dependencies that are neither names nor a subschema', { type: 'object', dependencies: { a: 5 } }, 'parameters.dependencies["a"] must be an array of property names or a subschema'],
    ['a dependentSchemas cycle back to the root', { type: 'object', dependentSchemas: { a: { $ref: '#' } } }, 'parameters has a $ref cycle'],
    ['additionalProperties false beside patternProperties and allOf', { type: 'object', patternProperties: { '^x': {} }, additionalProperties: false, allOf: [{ required: ['x1'] }] }, 'parameters has additionalProperties: false beside patternProperties and a subschema'],
    ['propertyNames other than a pattern, an enum or a const beside allOf', { type: 'object', propertyNames: { maxLength: 3 }, allOf: [{ required: ['a'] }] }, 'parameters.propertyNames beside allOf, anyOf, oneOf or a $ref, or in an allOf member or a definition, is enforced only as a pattern, an enum or a const of names'],
    ['propertyNames beside an additionalProperties subschema in an allOf member', { type: 'object', allOf: [{ propertyNames: { pattern: '^a' }, additionalProperties: { type: 'string' } }] }, 'parameters.allOf[0].propertyNames beside allOf, anyOf, oneOf or a $ref, or in an allOf member or a definition, is not enforced beside additionalProperties (a subschema)'],
    ['additionalProperties false beside patternProperties in a definition a $ref brings beside required', { type: 'object', properties: { o: { $ref: '#/$defs/O', required: ['a'] } }, $defs: { O: { type: 'object', properties: { a: {} }, patternProperties: { '^x': {} }, additionalProperties: false } } }, 'parameters.$defs["O"] has additionalProperties: false beside patternProperties'],
    ['propertyNames maxLength in a definition an allOf member refers to', { type: 'object', allOf: [{ $ref: '#/$defs/A' }, { required: ['a'] }], $defs: { A: { $ref: '#/$defs/O' }, O: { type: 'object', propertyNames: { maxLength: 3 } } } }, 'parameters.$defs["O"].propertyNames beside allOf'],
  ])('refuses %s, which the validator would not enforce, with INVALID_OPTIONS naming it', (_label, parameters, message) => {
    const root = new ToolRegistry();
    expect(() => root.register(tool(parameters))).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining(message) }));
    expect(root.get('t')).toBeUndefined();
  });

  it('refuses input nested too deep to validate against a recursive schema with INVALID_TOOL_INPUT naming its depth', async () => {
    const root = new ToolRegistry();
    root.register(tool({ type: 'object', properties: { n: { type: 'number' }, child: { $ref: '#' } } }));
    let deep: Record<string, unknown> = { n: 1 };
    for (let level = 1; level < 20_000; level++) deep = { child: deep };
    await expect(root.execute('t', deep, {} as never)).rejects.toMatchObject({ code: 'INVALID_TOOL_INPUT', message: expect.stringContaining('t input is nested 20000 levels deep') });
    await expect(root.execute('t', { child: { child: { n: 1 } } }, {} as never)).resolves.toMatchObject({ content: [{ text: 'ran' }] });
  });
});
