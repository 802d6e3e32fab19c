// One way to turn a schema failure into a SubagentError: the first issue, named by its full field
// path (`options.pool.maxThreads: …`). Only zod's types are imported, so loading this builds nothing.
import type { z } from 'zod';
import { SubagentError, describeError, printable, type SubagentErrorCode } from './errors.js';

/** The longest delay a Node timer takes: a longer one fires after 1 ms (with a warning). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * An option that sets a timer: `value` (or `fallback` when undefined) milliseconds, from 0 to
 * MAX_TIMER_MS (a longer timer fires at once), else `INVALID_OPTIONS` naming `field`.
 */
export function timerOption(value: unknown, fallback: number, field: string): number {
  const ms = value === undefined ? fallback : value;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_TIMER_MS) {
    throw new SubagentError('INVALID_OPTIONS', `${field} must be a number of milliseconds from 0 to ${MAX_TIMER_MS} (got ${printable(ms)})`);
  }
  return ms;
}

/**
 * `read()`, where a getter or proxy trap of the caller's `what` that throws (a revoked proxy
 * included) is `code` naming `what`, with the throw as cause, not a TypeError from deep inside.
 * A `SubagentError` thrown by the checks in `read` passes unchanged.
 */
export function readingInput<T>(what: string, code: SubagentErrorCode, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof SubagentError) throw error;
    throw new SubagentError(code, `${what} could not be read: a getter or proxy trap of it threw (${describeError(error)})`, { cause: error });
  }
}

/**
 * The `keys` a caller's object has (its own or inherited: a class's getters count, and what a
 * proxy's get trap gives), each read once into a plain object, so that later reads ask no getter
 * or proxy again. A key read as undefined is kept only where the object has it.
 */
export function pickFields(value: object, keys: readonly string[]): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  for (const key of keys) {
    const field = (value as Record<string, unknown>)[key];
    if (field !== undefined || key in value) copy[key] = field;
  }
  return copy;
}

/** A non-null object that is not an array: what the hand-written checks before a schema look into. */
export const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Whether `value` is a promise or another thenable (what `await` would wait for). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as { then?: unknown }).then === 'function';
}

/** `code` (`INVALID_OPTIONS`) unless `value` is an object with only `known` keys: a misspelt option is not silently dropped. */
export function assertKnownKeys(what: string, value: unknown, known: readonly string[], code: SubagentErrorCode = 'INVALID_OPTIONS'): void {
  if (!isRecord(value)) throw new SubagentError(code, `${what} must be an object`);
  const unknown = Object.keys(value).filter((key) => !known.includes(key));
  if (unknown.length > 0) throw new SubagentError(code, `${what} has unknown field(s) ${unknown.join(', ')} (known: ${known.join(', ')})`);
}

/** Like `every`, but a hole counts as `undefined` (which no hand-written check passes), as a schema reads it. */
export function everyItem(values: unknown[], check: (value: unknown) => boolean): boolean {
  for (let index = 0; index < values.length; index++) if (!check(values[index])) return false;
  return true;
}

/** `field: problem` for the first issue of `error`, its field path rooted at `path`. */
export function describeIssue(error: z.ZodError, path: string): string {
  // A failed parse has at least one issue; every caller roots the path at a named value.
  let issue = error.issues[0]!;
  // `int()` bounds a number at 2^53 - 1 (and zod reports that first): where the field has a lower
  // bound of its own (pool.maxNestingDepth ≤ 32), that bound is what the caller must be told.
  if (issue.code === 'too_big' && issue.maximum === Number.MAX_SAFE_INTEGER) {
    const first = issue;
    const own = error.issues.find((other) => other.code === 'too_big' && Number(other.maximum) < Number.MAX_SAFE_INTEGER && other.path.join('\0') === first.path.join('\0'));
    if (own) issue = own;
  }
  let field = path;
  for (const key of issue.path) field += typeof key === 'number' ? `[${key}]` : `.${String(key)}`;
  // A union where only one option takes the value's type: that option's issue says what to fix.
  while (issue.code === 'invalid_union') {
    const typed = issue.errors.filter((issues) => issues[0] !== undefined && !(issues[0].code === 'invalid_type' && issues[0].path.length === 0));
    if (typed.length !== 1) break;
    issue = typed[0]![0]!;
    for (const key of issue.path) field += typeof key === 'number' ? `[${key}]` : `.${String(key)}`;
  }
  const problem = issue.code === 'unrecognized_keys' ? `has unknown field(s) ${issue.keys.join(', ')}` : issue.message;
  return `${field}: ${problem}`;
}

/**
 * `value` parsed by `schema`, or a `SubagentError` with `code` naming the first bad field under
 * `path`; `hint` (what valid input looks like) is appended in parentheses. The cause is the ZodError.
 */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, code: SubagentErrorCode, path: string, hint?: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const message = describeIssue(parsed.error, path);
  throw new SubagentError(code, hint === undefined ? message : `${message} (${hint})`, { cause: parsed.error });
}

const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Whether `text` is well-formed UTF-16 (no lone surrogate). Ids, paths and event types are stored
 * as SQLite text, which is UTF-8: a lone surrogate would come back as U+FFFD, a different string.
 */
export function wellFormed(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}

/**
 * The first `limit` UTF-16 units of `text`, one fewer where the cut would part a surrogate pair:
 * half an emoji would be a lone surrogate, which UTF-8 (a terminal, SQLite, a model's server) turns into U+FFFD.
 */
export function headOf(text: string, limit: number): string {
  const parts = limit > 0 && limit < text.length && /[\ud800-\udbff][\udc00-\udfff]/.test(text.slice(limit - 1, limit + 1));
  return text.slice(0, parts ? limit - 1 : limit);
}

// JSON.stringify writes a lone UTF-16 surrogate as a `\udXXX` escape (a pair it writes as the
// character itself), which strict parsers (serde_json: DeepSeek's and OpenAI's servers, Rust ACP
// agents) refuse outright. An escape after an odd run of backslashes is text.
const LONE_SURROGATE_ESCAPE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/g;

/** `JSON.stringify(value)` with every lone surrogate in it written as U+FFFD. */
export function wellFormedJson(value: unknown): string {
  const json = JSON.stringify(value) ?? '{}';
  return json.includes('\\ud') ? json.replace(LONE_SURROGATE_ESCAPE, '$1\\ufffd') : json;
}
