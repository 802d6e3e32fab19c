// The one superjson instance used at every boundary (ports, stdio, SQLite). Plain superjson drops an
// error's class and custom fields and refuses objects keyed `constructor`/`__proto__`/`prototype`;
// the transformers registered here keep both, so codes and model-written JSON survive every hop.
import { SuperJSON } from 'superjson';
import type { SuperJSONResult, SuperJSONValue } from 'superjson';
import { z } from 'zod';
import { SubagentError, describeError, printable, type SubagentErrorCode } from './errors.js';
import { lazy } from './once.js';
import { repeatsProblem } from './plain-json.js';

/** The object form of an encoded value: structured-clone safe, so it can go straight to `postMessage`. */
export interface Encoded { json: unknown; meta?: unknown }

type JSONValue = SuperJSONResult['json'];

const instance = new SuperJSON();

const encodedSchema = lazy(() =>
  z.object({
    json: z.unknown(),
    meta: z.looseObject({ v: z.number().optional() }).optional(),
  }),
);

const errorPayloadSchema = lazy(() =>
  z.object({
    name: z.string(),
    message: z.string(),
    code: z.union([z.string(), z.number()]).optional(),
    stack: z.string().optional(),
    cause: encodedSchema().optional(),
  }),
);
// Any code a SubagentError carries crosses as it is: a JavaScript caller may make one with a code of
// its own (the in-process path keeps it too); ours are SUBAGENT_ERROR_CODES.
const subagentErrorPayloadSchema = lazy(() => errorPayloadSchema().extend({ code: z.union([z.string(), z.number()]).optional() }));

/** What the error transformers put on the wire; `cause` is present exactly when the error had one. */
interface ErrorPayload { name: string; message: string; code?: string | number; stack?: string; cause?: Encoded }

// Objects whose cause chain (or dangerous-key object) is being encoded right now. The nested
// `instance.serialize` calls below are outside superjson's own cycle tracking, so re-entry is cut here.
const inProgress = new Set<object>();

/** Encodes `value` through `instance` as an isolated payload, guarding against re-entry via `owner`. */
function nested(owner: object, value: unknown): Encoded {
  inProgress.add(owner);
  try {
    return unshared(toEncoded(serialize(value))) as Encoded;
  } finally {
    inProgress.delete(owner);
  }
}

/**
 * A copy of a payload's arrays and plain objects in which none is reached twice. superjson's output
 * reuses one object for a value met twice (its own annotations restore the sharing); the outer
 * encode walks into a nested payload and would annotate that sharing too, with paths inside the
 * payload that do not exist once it is decoded, so the result could not be decoded at all.
 */
function unshared(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(unshared);
  if (!isPlainObject(value)) return value;
  // `Object.fromEntries` defines own properties: no key touches the prototype.
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, unshared(item)]));
}

function toEncoded(result: SuperJSONResult): Encoded {
  return result.meta === undefined ? { json: result.json } : { json: result.json, meta: result.meta };
}

// `inPlace` rebuilds the value inside the payload's own objects instead of a copy of them.
function fromEncoded(encoded: Encoded, inPlace = false): unknown {
  return instance.deserialize(encoded as SuperJSONResult, { inPlace });
}

// superjson's output is JSON by construction, so a payload holding a nested `Encoded` is JSON too.
function errorPayload(error: Error): JSONValue {
  // A name or message set to another type (a number, a symbol) crosses as its text: the decoder takes strings.
  const payload: ErrorPayload = { name: printable(error.name), message: printable(error.message) };
  const code: unknown = (error as { code?: unknown }).code;
  if (typeof code === 'string' || typeof code === 'number') payload.code = code;
  const stack = stackOf(error);
  if (stack !== undefined) payload.stack = stack;
  // A cause that leads back to this error is dropped rather than followed forever.
  if ('cause' in error && !inProgress.has(error)) payload.cause = nested(error, error.cause);
  return payload as unknown as JSONValue;
}

/** The error's stack text, if it has one it can give: V8 writes it on first read, from a message that may be a symbol. */
function stackOf(error: Error): string | undefined {
  try {
    return typeof error.stack === 'string' ? error.stack : undefined;
  } catch {
    return undefined;
  }
}

/** Restores what `Error` itself does not take in its constructor: stack, and the cause's presence. */
function causeOption(payload: { cause?: Encoded | undefined }): { cause?: unknown } {
  return payload.cause === undefined ? {} : { cause: fromEncoded(payload.cause) };
}

function setHidden(target: Error, key: 'name' | 'stack', value: string): void {
  Object.defineProperty(target, key, { value, writable: true, configurable: true, enumerable: false });
}

const BUILTIN_ERRORS: Record<string, ErrorConstructor> = {
  Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError,
};

instance.registerCustom<SubagentError, JSONValue>(
  {
    isApplicable: (value): value is SubagentError => value instanceof SubagentError,
    serialize: errorPayload,
    deserialize: (raw) => {
      const payload = subagentErrorPayloadSchema().parse(raw);
      const error = new SubagentError(payload.code as SubagentErrorCode, payload.message, causeOption(payload));
      if (payload.stack !== undefined) setHidden(error, 'stack', payload.stack);
      return error;
    },
  },
  'SubagentError',
);

instance.registerCustom<Error, JSONValue>(
  {
    isApplicable: (value): value is Error => value instanceof Error && !(value instanceof SubagentError),
    serialize: errorPayload,
    deserialize: (raw) => {
      const payload = errorPayloadSchema().parse(raw);
      const Ctor = Object.hasOwn(BUILTIN_ERRORS, payload.name) ? BUILTIN_ERRORS[payload.name] ?? Error : Error;
      const error = new Ctor(payload.message, causeOption(payload));
      if (error.name !== payload.name) setHidden(error, 'name', payload.name);
      if (payload.code !== undefined) (error as { code?: unknown }).code = payload.code;
      if (payload.stack !== undefined) setHidden(error, 'stack', payload.stack);
      return error;
    },
  },
  'Error',
);

const DANGEROUS_KEYS = ['__proto__', 'constructor', 'prototype'] as const;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === null || proto === Object.prototype;
}

// superjson throws on these keys as a prototype-pollution guard, yet they are ordinary JSON keys (a
// model's tool input may hold `constructor`). Such objects travel as an entry list and are rebuilt
// with `Object.fromEntries`, which defines own properties and never touches the prototype.
instance.registerCustom<Record<string, unknown>, JSONValue>(
  {
    // Asked of every object encoded: written out, with no closure per call.
    isApplicable: (value): value is Record<string, unknown> =>
      isPlainObject(value) && (Object.hasOwn(value, DANGEROUS_KEYS[0]) || Object.hasOwn(value, DANGEROUS_KEYS[1]) || Object.hasOwn(value, DANGEROUS_KEYS[2])),
    serialize: (object) => {
      if (inProgress.has(object)) {
        throw new SubagentError(
          'INVALID_REQUEST',
          'A value has a cycle through an object with a `__proto__`, `constructor` or `prototype` key; ' +
            'break the cycle before sending it.',
        );
      }
      return nested(object, Object.entries(object)) as unknown as JSONValue;
    },
    deserialize: (raw) => {
      const entries = z.array(z.tuple([z.string(), z.unknown()])).parse(fromEncoded(encodedSchema().parse(raw)));
      return Object.fromEntries(entries);
    },
  },
  'object',
);

/** What `plainCopy` returns for a value it leaves to superjson. */
const NOT_PLAIN: unique symbol = Symbol('not plain');
// Deeper values go through superjson, which reports what the copy would not.
const MAX_PLAIN_DEPTH = 256;

/**
 * A copy of `value` if it is plain JSON: strings, finite numbers (not -0), booleans, null, dense
 * arrays and plain objects of those, with no dangerous key, each object reached once. That is
 * what superjson emits with no annotations, built here without its bookkeeping per node (most
 * payloads are plain: prompts, task data, results); anything else returns NOT_PLAIN.
 */
function plainCopy(value: unknown, seen: Set<object>, depth: number): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      return Number.isFinite(value) && !Object.is(value, -0) ? value : NOT_PLAIN;
    case 'object':
      break;
    default:
      return NOT_PLAIN;
  }
  if (value === null) return null;
  if (depth > MAX_PLAIN_DEPTH || seen.has(value)) return NOT_PLAIN;
  seen.add(value);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === Array.prototype) {
    const source = value as unknown[];
    const copy: unknown[] = [];
    for (let index = 0; index < source.length; index++) {
      // A hole or an undefined item needs superjson's annotation.
      const item = source[index] === undefined ? NOT_PLAIN : plainCopy(source[index], seen, depth + 1);
      if (item === NOT_PLAIN) return NOT_PLAIN;
      copy.push(item);
    }
    return copy;
  }
  if ((proto !== Object.prototype && proto !== null) || value === Object.prototype) return NOT_PLAIN;
  const source = value as Record<string, unknown>;
  const copy: Record<string, unknown> = {};
  const keys = Object.keys(source);
  for (let index = 0; index < keys.length; index++) {
    const key = keys[index]!;
    if (key === DANGEROUS_KEYS[0] || key === DANGEROUS_KEYS[1] || key === DANGEROUS_KEYS[2]) return NOT_PLAIN;
    const item = plainCopy(source[key], seen, depth + 1);
    if (item === NOT_PLAIN) return NOT_PLAIN;
    copy[key] = item;
  }
  return copy;
}

/**
 * `value` through superjson, or `INVALID_REQUEST` for a value whose shared objects would be written
 * out at more places than `repeatsProblem` allows. superjson's `dedupe` would write each once, but it
 * rebuilds a Map or Set around its placeholders (null) before it puts the objects back, merging
 * their entries; so the value is measured first. Plain values never come here (`plainCopy`).
 */
function serialize(value: unknown): SuperJSONResult {
  const sizes = new Map<object, number>();
  const total = writtenSize(value, sizes);
  const problem = repeatsProblem(sizes.size, total);
  if (problem) throw new SubagentError('INVALID_REQUEST', `A value cannot be encoded: ${problem}.`);
  return instance.serialize(value as SuperJSONValue);
}

/**
 * How many objects and arrays `value` holds, each counted at every place that holds it, as superjson
 * writes it (a cycle's way back counts nothing: it is written once). `sizes` keeps each object's
 * count, so each object is walked once.
 */
function writtenSize(value: unknown, sizes: Map<object, number>): number {
  if (typeof value !== 'object' || value === null) return 0;
  const known = sizes.get(value);
  if (known !== undefined) return known;
  sizes.set(value, 0);
  let size = 1;
  if (value instanceof Map) {
    for (const [key, item] of value) size += writtenSize(key, sizes) + writtenSize(item, sizes);
  } else if (value instanceof Set) {
    for (const item of value) size += writtenSize(item, sizes);
  } else if (value instanceof Error) {
    if ('cause' in value) size += writtenSize(value.cause, sizes);
  } else if (Array.isArray(value) || isPlainObject(value)) {
    for (const item of Object.values(value)) size += writtenSize(item, sizes);
  }
  sizes.set(value, size);
  return size;
}

/** Encodes `value` (Date, Map, Set, BigInt, URL, errors, cycles…) as a postMessage-safe `{ json, meta? }`. */
export function encode(value: unknown): Encoded {
  const json = plainCopy(value, new Set(), 0);
  if (json !== NOT_PLAIN) return { json };
  try {
    return toEncoded(serialize(value));
  } catch (error) {
    if (error instanceof SubagentError) throw error;
    throw new SubagentError('INVALID_REQUEST', `Value cannot be encoded: ${describeError(error)}.`, {
      cause: error,
    });
  }
}

/** A deep copy of `value` when it is plain JSON all through (no undefined, -0 or holes either), else undefined. */
export function plainSnapshot<T>(value: T): T | undefined {
  const json = plainCopy(value, new Set(), 0);
  return json === NOT_PLAIN ? undefined : (json as T);
}

/** A detached deep copy of `value` as it would cross a port: `decode(encode(value))`, in one walk when it is plain JSON. */
export function snapshot<T>(value: T): T {
  const json = plainCopy(value, new Set(), 0);
  return json === NOT_PLAIN ? decodeOwned<T>(encode(value)) : (json as T);
}

/** Decodes what `encode` produced. Malformed input throws `SubagentError` `CORRUPT_DATA`. */
export function decode<T = unknown>(encoded: Encoded): T {
  return decodeWith<T>(encoded, false);
}

/**
 * `decode` for a payload nobody else holds (fresh off a port, just parsed, just encoded): the
 * value is rebuilt inside the payload's own objects, sparing a copy of the whole tree. The payload
 * must not be used afterwards.
 */
export function decodeOwned<T = unknown>(encoded: Encoded): T {
  return decodeWith<T>(encoded, true);
}

/** A payload without annotations, which zod would accept as it is (a hand check before zod). */
function plainPayload(value: unknown): value is Encoded {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && (value as Partial<Encoded>).meta === undefined;
}

function decodeWith<T>(encoded: Encoded, inPlace: boolean): T {
  try {
    return fromEncoded(plainPayload(encoded) ? encoded : encodedSchema().parse(encoded), inPlace) as T;
  } catch (error) {
    throw corrupt(error);
  }
}

/** Encodes `value` as one JSON string (for stdio, ACP `_meta` and SQLite). */
export function stringify(value: unknown): string {
  return JSON.stringify(encode(value));
}

/** Decodes what `stringify` produced. Malformed text throws `SubagentError` `CORRUPT_DATA`. */
export function parse<T = unknown>(text: string): T {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw corrupt(error);
  }
  return decodeOwned<T>(raw as Encoded);
}

function corrupt(cause: unknown): SubagentError {
  return new SubagentError(
    'CORRUPT_DATA',
    `Encoded data is malformed (${describeError(cause)}); it was not produced by this codec or was altered.`,
    { cause },
  );
}
