// Content blocks and message sources: the data every message, tool result and subagent output is
// made of. All of it is plain JSON-safe data so it can cross threads, processes and SQLite.
import { randomUUID } from 'node:crypto';
import { SubagentError } from './errors.js';
import { assertKnownKeys, isRecord, readingInput } from './parse.js';
import { MAX_CONTENT_CHARS, MAX_CONTENT_DEPTH, charsProblem, jsonProblem, readable, sharingProblem, writtenChars, writtenSize, type Tally, type Walked } from './plain-json.js';

export { MAX_CONTENT_CHARS, MAX_CONTENT_DEPTH, charsIn, plainJsonProblem } from './plain-json.js';

/** A piece of message content. */
export type ContentBlock =
  | TextBlock
  | ReasoningBlock
  | ImageBlock
  | ToolCallBlock
  | ToolResultBlock;

export interface TextBlock { type: 'text'; text: string }
export interface ReasoningBlock { type: 'reasoning'; text: string }
/** `data` is base64. */
export interface ImageBlock { type: 'image'; mimeType: string; data: string }
export interface ToolCallBlock { type: 'tool_call'; id: string; name: string; input: unknown }
export interface ToolResultBlock {
  type: 'tool_result';
  callId: string;
  content: ContentBlock[];
  isError?: boolean;
}

export type SessionId = string;
export type MessageId = string;

/** Who a message came from. Attribution only: a source never grants authority. */
export type MessageSource =
  | { kind: 'user' }
  | { kind: 'tool'; callId: string }
  | { kind: 'plugin'; name: string }
  | { kind: 'coordinator'; senderSessionId: SessionId }
  | { kind: 'subagent-report'; senderSessionId: SessionId }
  | { kind: 'subagent-settled'; senderSessionId: SessionId; summary?: string };

/**
 * A new session, run or message id (a UUID). Node builds `randomUUID()` by joining 20 pieces, and
 * V8 keeps such a string as a tree of ~500 bytes until something reads a character; reading one
 * here leaves a flat string of ~70 bytes, which matters for ids held by every run in flight.
 */
export function newId(): string {
  const id = randomUUID();
  if (id.charCodeAt(8) !== 0x2d) throw new Error(`malformed UUID ${id}`);
  return id;
}

/** A short text block. */
export function text(value: string): TextBlock {
  if (typeof value !== 'string') throw new SubagentError('INVALID_REQUEST', `text() takes a string, not ${describeKind(value)}`);
  return { type: 'text', text: value };
}

/** `null`, `an array` or the typeof of `value`, for messages about a wrong argument. */
export function describeKind(value: unknown): string {
  return value === null ? 'null' : Array.isArray(value) ? 'an array' : `a value of type ${typeof value}`;
}

/** The concatenated text of the `text` blocks of `content`. */
export function textOf(content: readonly ContentBlock[]): string {
  if (!Array.isArray(content)) throw new SubagentError('INVALID_REQUEST', `textOf() takes an array of content blocks, not ${describeKind(content)}`);
  let out = '';
  for (const block of content as readonly unknown[]) {
    if (!isRecord(block)) throw new SubagentError('INVALID_REQUEST', `textOf() takes content blocks, and one is ${describeKind(block)}`);
    if (block['type'] === 'text') out += block['text'] as string;
  }
  return out;
}

/** Freezes a JSON-like value and everything reachable from it; returns it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    // Every event and result passes here: loops that allocate no key array (`for…in` reads the
    // shape's cached keys), over own properties only, as `Object.keys`.
    if (Array.isArray(value)) {
      for (let index = 0; index < value.length; index++) deepFreeze(value[index]);
    } else {
      for (const key in value) if (Object.hasOwn(value, key)) deepFreeze((value as Record<string, unknown>)[key]);
    }
  }
  return value;
}

/** How many arrays and objects enclose the deepest value in `value`, walked without recursion (each object once). */
export function nestingDepth(value: unknown): number {
  let deepest = 0;
  const seen = new Set<object>();
  const stack: [unknown, number][] = [[value, 1]];
  for (let next = stack.pop(); next; next = stack.pop()) {
    const [item, depth] = next;
    if (typeof item !== 'object' || item === null || seen.has(item)) continue;
    seen.add(item);
    deepest = Math.max(deepest, depth);
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/**
 * Whether JSON parsed from `text` holds a number no double holds (`1e309` parses as Infinity, which a
 * log stores as null and a result cannot carry), walked without recursion; false at once for text
 * with neither an exponent of three digits or more nor a run of 309 digits.
 */
export function parsedNonFinite(text: string, parsed: unknown): boolean {
  if (!/\d[eE]\+?\d{3}|\d{309}/.test(text)) return false;
  const stack: unknown[] = [parsed];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item === 'number' && !Number.isFinite(item)) return true;
    if (typeof item === 'object' && item !== null) for (const value of Object.values(item)) stack.push(value);
  }
  return false;
}

/**
 * `MODEL_OUTPUT_TOO_DEEP` naming `source` (the model) and the depth when the input of its tool call
 * `name` nests deeper than MAX_CONTENT_DEPTH, or undefined: such a call is refused before anything
 * logs, freezes, stores or copies it.
 */
export function deepToolInputFailure(source: string, name: string, input: unknown): { code: string; message: string } | undefined {
  let depth: number;
  try {
    depth = nestingDepth(input);
  } catch {
    // A getter or proxy threw: the caller's own check of the input says it could not be read.
    return undefined;
  }
  if (depth <= MAX_CONTENT_DEPTH) return undefined;
  return {
    code: 'MODEL_OUTPUT_TOO_DEEP',
    message: `${source} sent a call of tool ${name} whose input is nested ${depth} levels deep, more than the ${MAX_CONTENT_DEPTH} a session log holds; no tool of that answer ran`,
  };
}

/**
 * `MODEL_OUTPUT_TOO_LARGE` naming `source` (the model) once one answer's text, reasoning and tool
 * input hold `chars` characters, more than MAX_CONTENT_CHARS: a session log stores an answer as one
 * JSON text, which could not be built past it (the answer would be lost with the rest of the log).
 */
export function largeAnswerFailure(source: string, chars: number): { code: string; message: string } | undefined {
  if (chars <= MAX_CONTENT_CHARS) return undefined;
  return {
    code: 'MODEL_OUTPUT_TOO_LARGE',
    message: `${source} sent an answer whose text, reasoning and tool input hold more than ${MAX_CONTENT_CHARS} characters (64 Mi), more than a session log stores in one message; it was cut there and no tool of it ran`,
  };
}

const isString = (value: unknown) => typeof value === 'string';

/** An image media type (`image/png`, `image/svg+xml`). */
const IMAGE_TYPE = /^image\/[a-z0-9][a-z0-9.+-]*$/i;
const NOT_BASE64 = /[^A-Za-z0-9+/=]/;

/** Whether `value` is an image media type, as a model's API takes one in an image's data URL. */
export const isImageType = (value: unknown): boolean => typeof value === 'string' && IMAGE_TYPE.test(value);

/** Whether `value` is standard padded base64 of some bytes (what a model's API takes as an image), checked in one scan. */
export function isBase64(value: unknown): boolean {
  if (typeof value !== 'string' || value === '' || value.length % 4 !== 0 || NOT_BASE64.test(value)) return false;
  const pad = value.indexOf('=');
  return pad === -1 || (pad >= value.length - 2 && value.endsWith('='));
}

/** The fields each block type must carry, with their check. */
const BLOCK_FIELDS: Record<ContentBlock['type'], readonly (readonly [string, (value: unknown) => boolean, string])[]> = {
  text: [['text', isString, 'a string']],
  reasoning: [['text', isString, 'a string']],
  // An image a model could not take would stay in the history and fail that turn and every later one.
  image: [
    ['mimeType', isImageType, 'an image media type such as image/png'],
    ['data', isBase64, "the image's bytes as padded base64"],
  ],
  tool_call: [
    ['id', isString, 'a string'],
    ['name', isString, 'a string'],
  ],
  tool_result: [
    ['callId', isString, 'a string'],
    ['content', Array.isArray, 'an array of content blocks'],
    ['isError', (value) => value === undefined || typeof value === 'boolean', 'a boolean when given'],
  ],
};

/**
 * Why `content` is not a list of content blocks, or undefined. `depth`: how many values enclose
 * `content` (a `tool_result` nests its blocks two levels down). `written` adds up the written size
 * of the blocks of the outermost list (a nested list's is in its block's).
 */
function blocksProblem(content: unknown, path: string, walked: Walked, tally: Tally, depth = 0, written?: { total: number }): string | undefined {
  if (!Array.isArray(content)) return `${path} must be an array of content blocks`;
  // Before recursing: results nested thousands deep would overflow the stack here.
  if (depth >= MAX_CONTENT_DEPTH) return `${path} is nested more than ${MAX_CONTENT_DEPTH} levels deep`;
  for (let index = 0; index < content.length; index++) {
    const at = `${path}[${index}]`;
    const block: unknown = content[index];
    if (block === null || typeof block !== 'object' || Array.isArray(block)) return `${at} must be a content block object`;
    const { type } = block as { type?: unknown };
    const fields = typeof type === 'string' && Object.hasOwn(BLOCK_FIELDS, type) ? BLOCK_FIELDS[type as ContentBlock['type']] : undefined;
    if (!fields) return `${at}.type must be one of ${Object.keys(BLOCK_FIELDS).join(', ')}`;
    for (const [field, check, what] of fields) {
      if (!check((block as Record<string, unknown>)[field])) return `${at}.${field} must be ${what}`;
    }
    const problem = type === 'tool_result' ? blocksProblem((block as ToolResultBlock).content, `${at}.content`, walked, tally, depth + 2) : undefined;
    if (problem) return problem;
    const entry = jsonProblem(block, at, 0, walked, tally);
    if (typeof entry === 'string') return entry;
    if (written) written.total += writtenSize(entry);
  }
  return undefined;
}

/**
 * Why `content` is not a list of content blocks every boundary can carry (a known `type` with its
 * fields, and plain JSON all through: what a session log stores), or undefined when it is. A
 * getter or proxy that throws while it is read makes it unreadable, not a crash.
 */
export function contentProblem(content: unknown, path = 'content'): string | undefined {
  return readable(path, () => {
    const walked: Walked = new Map();
    const tally: Tally = { chars: 0 };
    const written = { total: 0 };
    return (
      blocksProblem(content, path, walked, tally, 0, written) ??
      sharingProblem(path, walked, written.total) ??
      charsProblem(path, writtenChars(content as unknown[], tally.chars, written.total, walked.size))
    );
  });
}

/**
 * A copy of `content` (checked by {@link contentProblem}), or why there is none. The copy is
 * checked too: a getter or proxy may answer the check with plain JSON and the copy with a BigInt, a
 * cycle or a value nested thousands deep, which no log or port could then carry.
 */
export function copyContent(content: unknown, path = 'content'): { content: ContentBlock[] } | { problem: string } {
  const problem = contentProblem(content, path);
  if (problem) return { problem };
  let copy: unknown;
  try {
    copy = structuredClone(content);
  } catch {
    return { problem: `${path} could not be copied (a getter or proxy threw, or returned what cannot be copied)` };
  }
  const changed = contentProblem(copy, path);
  return changed ? { problem: `${changed} (read again, it was not what it was when checked)` } : { content: copy as ContentBlock[] };
}

/** Throws `INVALID_REQUEST` unless `content` is a non-empty message of such blocks. */
export function assertMessageContent(content: unknown): asserts content is ContentBlock[] {
  readingInput('message content', 'INVALID_REQUEST', () => {
    assertMessageShape(content);
    const problem = contentProblem(content);
    if (problem) throw new SubagentError('INVALID_REQUEST', `message ${problem}`);
  });
}

function assertMessageShape(content: unknown): asserts content is unknown[] {
  if (!Array.isArray(content) || content.length === 0) {
    throw new SubagentError('INVALID_REQUEST', 'message content must be a non-empty array of content blocks');
  }
}

/** A checked copy of a message's `content` (see {@link copyContent}); `INVALID_REQUEST` unless it is a non-empty message of content blocks. */
export function copyMessageContent(content: unknown): ContentBlock[] {
  // A revoked proxy or a throwing trap is INVALID_REQUEST, not a TypeError from inside the copy.
  return readingInput('message content', 'INVALID_REQUEST', () => {
    assertMessageShape(content);
    const copied = copyContent(content);
    if ('problem' in copied) throw new SubagentError('INVALID_REQUEST', `message ${copied.problem}`);
    return copied.content;
  });
}

/** The fields of each source kind beside `kind`: true for a required string, false for an optional one. */
const SOURCE_FIELDS: Readonly<Record<MessageSource['kind'], Readonly<Record<string, boolean>>>> = {
  user: {},
  tool: { callId: true },
  plugin: { name: true },
  coordinator: { senderSessionId: true },
  'subagent-report': { senderSessionId: true },
  'subagent-settled': { senderSessionId: true, summary: false },
};

/** Why the fields of a source (read once into `record`) do not make a source of its kind. */
function sourceProblem(record: Record<string, unknown>): string | undefined {
  const kind = record.kind;
  if (typeof kind !== 'string' || !Object.hasOwn(SOURCE_FIELDS, kind)) {
    return `source.kind must be one of ${Object.keys(SOURCE_FIELDS).join(', ')}`;
  }
  const fields = SOURCE_FIELDS[kind as MessageSource['kind']];
  for (const key of Object.keys(record)) {
    if (key !== 'kind' && !Object.hasOwn(fields, key)) return `source.${key} is not a field of a '${kind}' source`;
  }
  for (const [key, required] of Object.entries(fields)) {
    const value = record[key];
    if (value === undefined && !required) continue;
    if (typeof value !== 'string') return `source.${key} must be a string`;
  }
  return undefined;
}

/**
 * A plain copy of a message's `source`, checked against its kind (it goes into the session log and
 * across threads as it is). Throws `INVALID_REQUEST` for anything else.
 */
export function copyMessageSource(source: unknown): MessageSource {
  const copy: Record<string, unknown> = {};
  const problem = readable('source', () => {
    if (typeof source !== 'object' || source === null || Array.isArray(source)) return 'source must be an object such as { kind: "user" }';
    const proto: unknown = Object.getPrototypeOf(source);
    if (proto !== Object.prototype && proto !== null) return 'source is a class instance, not a plain object';
    // Each field read once: what was checked is what is kept.
    // Defined, not assigned: an own `__proto__` key (JSON from the wire) is a field like any other, refused below.
    for (const [key, value] of Object.entries(source)) if (value !== undefined) Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true });
    return sourceProblem(copy);
  });
  if (problem) throw new SubagentError('INVALID_REQUEST', `message ${problem}`);
  return copy as unknown as MessageSource;
}

/**
 * The `source` of the `opts` of an agent's `followup`, `steer` or `inject`; `INVALID_REQUEST` for
 * opts that are no object (null is none) or name another field (a misspelt `source` would be dropped unseen).
 */
export function sourceOption(opts: { source?: MessageSource } | undefined): MessageSource | undefined {
  if (opts == null) return undefined;
  assertKnownKeys('message opts', opts, ['source'], 'INVALID_REQUEST');
  return opts.source;
}
