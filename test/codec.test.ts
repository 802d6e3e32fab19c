// The boundary codec: frozen values through a real MessageChannel and through strings, a fast-check
// round-trip property, and the errors (class, code, cause) that plain superjson would lose.
import { once } from 'node:events';
import { inspect, isDeepStrictEqual } from 'node:util';
import { MessageChannel } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { SubagentError } from 'subagent-host';
import { decode, encode, parse, stringify } from 'subagent-host/internals';
import type { ContentBlock } from 'subagent-host';
import type { Encoded } from 'subagent-host/internals';
import { thrown } from './helpers.js';

// Every port a test opens is tracked until its 'close' event: an unref'd port that was never
// closed is invisible to process.getActiveResourcesInfo(), so the check counts ports itself.
const openPorts = new Set<MessagePort>();
const closedPorts: MessagePort[] = [];

afterEach(() => {
  for (const port of openPorts) port.close();
});

afterAll(async () => {
  // 'close' arrives asynchronously after close(); a port that was never closed never empties the set.
  for (let waited = 0; openPorts.size > 0 && waited < 10_000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(openPorts.size).toBe(0);
  expect(closedPorts.length).toBeGreaterThan(0);
});

function track(port: MessagePort): void {
  openPorts.add(port);
  port.once('close', () => {
    openPorts.delete(port);
    closedPorts.push(port);
  });
}

/** Sends `encode(value)` from one end of a fresh channel and decodes what the other end receives. */
async function throughPort(value: unknown): Promise<unknown> {
  const { port1, port2 } = new MessageChannel();
  track(port1);
  track(port2);
  const received = once(port2, 'message') as Promise<[Encoded]>;
  port1.postMessage(encode(value));
  const [message] = await received;
  return decode(message);
}


function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
  }
  return value;
}

const full = { depth: Infinity, maxArrayLength: Infinity, maxStringLength: Infinity, breakLength: Infinity };
/** Strict deep equality that also sees what `isDeepStrictEqual` cannot (a URL's href, -0 in Sets). */
function same(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a, b) && inspect(a, full) === inspect(b, full);
}

function circular(): unknown {
  const node: Record<string, unknown> = { name: 'root' };
  node['self'] = node;
  node['children'] = [{ parent: node }];
  return node;
}

function shared(): unknown {
  const leaf = { when: new Date(5) };
  return { a: leaf, b: [leaf], c: new Map([['leaf', leaf]]) };
}

const blocks: ContentBlock[] = [
  { type: 'text', text: 'résumé ✓ \u{1F600}' },
  { type: 'reasoning', text: '' },
  { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
  // Model-written JSON may use keys superjson refuses by default.
  { type: 'tool_call', id: 'c1', name: 'edit', input: JSON.parse('{"__proto__":{"x":1},"constructor":[-1],"prototype":null}') },
  { type: 'tool_result', callId: 'c1', content: [{ type: 'text', text: 'ok' }], isError: false },
];

const cases: [string, () => unknown][] = [
  ['undefined at the top level', () => undefined],
  ['Date', () => new Date(1_700_000_000_123)],
  ['Map with object keys', () => new Map<unknown, unknown>([[{ k: 1 }, 'a'], ['s', new Date(0)]])],
  ['Set', () => new Set<unknown>([1, 'two', { three: 3 }])],
  ['BigInt', () => ({ big: 2n ** 70n, negative: -5n })],
  ['undefined in objects and arrays', () => ({ a: undefined, list: [undefined, 1] })],
  ['-0', () => ({ zero: -0, list: [-0] })],
  ['NaN and ±Infinity', () => [NaN, Infinity, -Infinity]],
  ['URL', () => ({ url: new URL('https://example.com/a?b=c#d') })],
  ['nested SubagentError with code and cause', () =>
    new SubagentError('START_FAILED', 'outer', { cause: new SubagentError('CLOSED', 'inner') })],
  ['plain Error cause', () => new SubagentError('CANCELLED', 'stop', { cause: new RangeError('too far') })],
  ['circular references', circular],
  ['shared references', shared],
  ['shared references between plain objects', () => {
    const leaf = { text: 'same' };
    return { a: leaf, list: [leaf, [leaf]] };
  }],
  ['content blocks', () => blocks],
  // The sharing sits inside a payload encoded on its own (an error's cause, a `constructor`-keyed object).
  ['an error whose cause holds one object twice', () => {
    const request = { url: 'https://api.example.com', retries: 3 };
    return new SubagentError('UNAUTHORIZED', 'the API refused the key', { cause: { request, lastAttempt: request } });
  }],
  ['an object with a `constructor` key holding one object twice', () => {
    const leaf = { text: 'same' };
    return Object.assign(JSON.parse('{"constructor":"x"}') as Record<string, unknown>, { a: leaf, list: [leaf] });
  }],
];

describe('codec through a real MessageChannel', () => {
  it.each(cases)('round-trips %s', async (_name, make) => {
    const value = deepFreeze(make());
    expect(same(await throughPort(value), value)).toBe(true);
  });

  it.each(cases)('round-trips %s through stringify and parse', (_name, make) => {
    const value = deepFreeze(make());
    expect(same(parse(stringify(value)), value)).toBe(true);
  });

  it('keeps circular and shared references as references', async () => {
    const loop = (await throughPort(circular())) as { self: unknown; children: { parent: unknown }[] };
    expect(loop.self).toBe(loop);
    expect(loop.children[0]?.parent).toBe(loop);
    const tree = (await throughPort(shared())) as { a: unknown; b: unknown[]; c: Map<string, unknown> };
    expect(tree.b[0]).toBe(tree.a);
    expect(tree.c.get('leaf')).toBe(tree.a);
  });

  it('keeps one plain object reached twice as one object, at every level of a doubling value', async () => {
    const leaf = { text: 'same' };
    const tree = (await throughPort({ a: leaf, list: [leaf] })) as { a: unknown; list: unknown[] };
    expect(tree.list[0]).toBe(tree.a);
    // Each level holds the one below twice.
    let doubled: unknown = { n: 1 };
    for (let level = 0; level < 12; level++) doubled = [doubled, doubled];
    let back = parse(stringify(doubled));
    for (let level = 0; level < 12; level++) {
      const [left, right] = back as unknown[];
      expect(right).toBe(left);
      back = left;
    }
    expect(back).toStrictEqual({ n: 1 });
  });

  it.each([
    ['plain objects', () => ({ n: 1 })],
    ['a Date and undefined', () => ({ when: new Date(0), none: undefined })],
    ['a Map', () => new Map([['k', { n: 1 }]])],
  ])('refuses, INVALID_REQUEST, a value holding each level twice, 40 levels deep, over %s', (_name, leaf) => {
    // Written out in full it would hold 2^41 objects: the encoding never finished.
    let doubled: unknown = leaf();
    for (let level = 0; level < 40; level++) doubled = { a: doubled, b: [doubled] };
    for (const value of [doubled, new SubagentError('CLOSED', 'gone', { cause: doubled }), new Map([['k', doubled]])]) {
      const error = thrown(() => encode(value));
      expect(error).toBeInstanceOf(SubagentError);
      expect(error).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringMatching(/held at so many places .*refer to it by a key or an index/) });
    }
  });

  it('keeps many objects each held at a few places, and cycles, as they were', () => {
    const leaves = Array.from({ length: 1_000 }, (_, index) => ({ index, when: new Date(index) }));
    const value: Record<string, unknown> = { leaves, again: leaves.map((leaf) => [leaf, leaf]), lookup: new Map(leaves.map((leaf) => [leaf.index, leaf])) };
    value['self'] = value;
    const back = parse<typeof value>(stringify(value));
    expect(back['self']).toBe(back);
    const [first] = back['leaves'] as typeof leaves;
    expect((back['again'] as unknown[][])[0]).toStrictEqual([first, first]);
    expect((back['again'] as unknown[][])[0]?.[1]).toBe(first);
    expect((back['lookup'] as Map<number, unknown>).get(0)).toBe(first);
    expect(first?.when).toStrictEqual(new Date(0));
  });

  it('keeps an own `__proto__` key an own key, never the prototype of the copy', async () => {
    const value = JSON.parse('{"__proto__":{"polluted":true},"plain":1}') as Record<string, unknown>;
    for (const decoded of [await throughPort(value), parse(stringify(value))] as Record<string, unknown>[]) {
      expect(Object.getPrototypeOf(decoded)).toBe(Object.prototype);
      expect(decoded['polluted']).toBeUndefined();
      expect(Object.hasOwn(decoded, '__proto__')).toBe(true);
      expect(Object.getOwnPropertyDescriptor(decoded, '__proto__')?.value).toStrictEqual({ polluted: true });
    }
  });

  it.each(['constructor', 'toString', 'hasOwnProperty'])('decodes an Error named %s as an Error with that name', async (name) => {
    const error = new Error('odd name');
    error.name = name;
    for (const decoded of [await throughPort(error), parse(stringify(error))]) {
      expect(decoded).toBeInstanceOf(Error);
      expect(decoded).toMatchObject({ name, message: 'odd name' });
    }
  });

  it('keeps the SubagentError class, code and a SubagentError cause with its own plain cause', async () => {
    const inner = new SubagentError('CLOSED', 'port closed', { cause: new TypeError('bad port') });
    const decoded = await throughPort(new SubagentError('START_FAILED', 'child failed', { cause: inner }));
    expect(decoded).toBeInstanceOf(SubagentError);
    const error = decoded as SubagentError;
    expect(error.code).toBe('START_FAILED');
    expect(error.name).toBe('SubagentError');
    expect(error.cause).toBeInstanceOf(SubagentError);
    expect((error.cause as SubagentError).code).toBe('CLOSED');
    const root = (error.cause as SubagentError).cause;
    expect(root).toBeInstanceOf(TypeError);
    expect(root).toMatchObject({ name: 'TypeError', message: 'bad port' });
  });

  it('keeps the name, message and code of a foreign error', async () => {
    const error = Object.assign(new Error('no such file'), { code: 'ENOENT' });
    error.name = 'SystemError';
    const decoded = await throughPort(error);
    expect(decoded).toBeInstanceOf(Error);
    expect(decoded).toMatchObject({ name: 'SystemError', message: 'no such file', code: 'ENOENT' });
  });

  it('carries an error whose name or message was set to another type as their text, not as data it cannot decode', async () => {
    const error = new Error('numbered');
    (error as { name: unknown }).name = 404;
    expect(await throughPort(error)).toMatchObject({ name: '404', message: 'numbered' });
    const symbolic = new Error();
    (symbolic as { message: unknown }).message = Symbol('why');
    expect(parse(stringify(symbolic))).toMatchObject({ name: 'Error', message: 'Symbol(why)' });
  });

  it('ends a cause chain that loops back to its error instead of recursing forever', async () => {
    const error = new Error('loop');
    error.cause = { again: error };
    const decoded = (await throughPort(error)) as Error;
    expect(decoded.message).toBe('loop');
    expect((decoded.cause as { again: Error }).again.message).toBe('loop');
  });
});

describe('codec property', () => {
  // Leaves superjson must restore beyond JSON; containers nest them. Objects come back with
  // Object.prototype, so null-prototype dictionaries are out of scope.
  const { tree } = fc.letrec<{ tree: unknown }>((tie) => ({
    tree: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      fc.jsonValue({ maxDepth: 1 }),
      fc.date({ noInvalidDate: true }),
      fc.bigInt(),
      fc.constantFrom(undefined, NaN, -0, Infinity, -Infinity),
      fc.webUrl().map((href) => new URL(href)),
      fc.array(tie('tree'), { maxLength: 4 }),
      fc.dictionary(fc.string(), tie('tree'), { maxKeys: 4, noNullPrototype: true }),
      fc.array(fc.tuple(fc.oneof(fc.string(), fc.integer()), tie('tree')), { maxLength: 4 }).map((e) => new Map(e)),
      fc.array(fc.oneof(fc.string(), fc.integer(), fc.bigInt()), { maxLength: 4 }).map((items) => new Set(items)),
    ),
  }));

  // structuredClone is the algorithm postMessage applies; the table above covers the port itself.
  it('decode(encode(v)) equals v for JSON values and richer values', () => {
    fc.assert(fc.property(fc.jsonValue(), (value) => same(decode(structuredClone(encode(value))), value)));
    fc.assert(fc.property(tree, (value) => same(decode(structuredClone(encode(value))), value)));
  });

  it('parse(stringify(v)) equals v for JSON values and richer values', () => {
    fc.assert(fc.property(fc.jsonValue(), (value) => same(parse(stringify(value)), value)));
    fc.assert(fc.property(tree, (value) => same(parse(stringify(value)), value)));
  });
});

describe('codec on plain JSON', () => {
  /** Every object and array inside `value`. */
  function containers(value: unknown, into = new Set<object>()): Set<object> {
    if (typeof value === 'object' && value !== null) {
      into.add(value);
      for (const item of Object.values(value)) containers(item, into);
    }
    return into;
  }

  it('encodes a copy with no annotations that shares no object with the value', () => {
    const value = { prompt: [{ type: 'text', text: 'hi' }], n: 1.5, ok: true, none: null, nested: { list: [[], {}] } };
    const encoded = encode(value);
    expect(encoded).toEqual({ json: value });
    expect('meta' in encoded).toBe(false);
    const inside = containers(value);
    for (const copy of containers(encoded.json)) expect(inside.has(copy)).toBe(false);
  });

  it('encodes a null-prototype object as a plain one', () => {
    const value = Object.assign(Object.create(null) as Record<string, unknown>, { a: 1 });
    const json = encode(value).json as object;
    expect(Object.getPrototypeOf(json)).toBe(Object.prototype);
    expect(decode({ json })).toEqual({ a: 1 });
  });
});

describe('codec on malformed input', () => {
  const malformed: [string, unknown][] = [
    ['null', null],
    ['an object without json', { meta: { v: 1 } }],
    ['a non-object meta', { json: 1, meta: 7 }],
    ['an unknown custom type', { json: 1, meta: { values: [['custom', 'nope']], v: 1 } }],
    ['an error payload that is not an object', { json: 1, meta: { values: [['custom', 'SubagentError']], v: 1 } }],
    ['an error code that is neither a string nor a number', {
      json: { name: 'SubagentError', message: 'm', code: true },
      meta: { values: [['custom', 'SubagentError']], v: 1 },
    }],
  ];

  it.each(['RATE_LIMITED', '', 42])('keeps a code of the caller’s own (%j) on a SubagentError, as the in-process path does', (code) => {
    const made = new SubagentError(code as SubagentError['code'], 'slow down');
    const copy = decode(encode(made));
    expect(copy).toBeInstanceOf(SubagentError);
    expect(copy).toMatchObject({ code, message: 'slow down' });
  });

  it.each(malformed)('decode of %s throws CORRUPT_DATA with the original error as cause', (_name, input) => {
    const error = thrown(() => decode(input as Encoded));
    expect(error).toBeInstanceOf(SubagentError);
    expect((error as SubagentError).code).toBe('CORRUPT_DATA');
    expect((error as SubagentError).cause).toBeInstanceOf(Error);
  });

  it('encode of a cycle through an object with a `constructor` key throws INVALID_REQUEST, not a stack overflow', () => {
    const input: Record<string, unknown> = JSON.parse('{"constructor":"x"}') as Record<string, unknown>;
    input['self'] = { back: input };
    const error = thrown(() => encode(input));
    expect(error).toBeInstanceOf(SubagentError);
    expect((error as SubagentError).code).toBe('INVALID_REQUEST');
    expect((error as SubagentError).message).toMatch(/cycle .*break the cycle/);
  });

  it('parse of text that is not JSON throws CORRUPT_DATA with the SyntaxError as cause', () => {
    const error = thrown(() => parse('{"json":'));
    expect(error).toBeInstanceOf(SubagentError);
    expect((error as SubagentError).code).toBe('CORRUPT_DATA');
    expect((error as SubagentError).cause).toBeInstanceOf(SyntaxError);
  });
});
