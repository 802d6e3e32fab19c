// Boundary checks shared by both backends: header validation, the seq contract of `append`, and
// event encoding to the JSON text both backends store.
import { z } from 'zod';
import { MAX_CONTENT_DEPTH, describeKind, type SessionId } from '../seam/content.js';
import { SubagentError, printable } from '../seam/errors.js';
import { describeIssue, isRecord, parseOrThrow, wellFormed } from '../seam/parse.js';
import type { SessionEvent, SessionHeader } from '../seam/session-types.js';

const count = z.int().nonnegative();

/** A header as `create` accepts it; unknown keys are refused so a header always round-trips. */
const WELL_FORMED = 'must be well-formed text (a lone UTF-16 surrogate cannot be stored)';
const headerSchema = z.strictObject({
  id: z.string().min(1).refine(wellFormed, WELL_FORMED),
  createdAt: z.number(),
  cwd: z.string().refine(wellFormed, WELL_FORMED).optional(),
  parentSession: z.string().min(1).refine(wellFormed, WELL_FORMED).optional(),
  origin: z.literal('subagent').optional(),
  delegationDepth: count.optional(),
  seedLength: count.optional(),
});

const envelopeSchema = z.object({ type: z.string().min(1).refine(wellFormed, WELL_FORMED), time: z.number() });

// Hand-written checks of the common case, run before the schemas: each passes only values its
// schema accepts, so a well-formed header or event skips zod, and anything else still meets it.
const HEADER_KEYS = new Set(Object.keys(headerSchema.shape));
const optionalCount = (value: unknown) => value === undefined || (Number.isSafeInteger(value) && (value as number) >= 0);
const optionalText = (value: unknown, min: number) => value === undefined || (typeof value === 'string' && value.length >= min && wellFormed(value));

function plainHeader(value: unknown): boolean {
  // A plain object: the strict schema also refuses inherited enumerable keys.
  if (!isRecord(value) || Object.getPrototypeOf(value) !== Object.prototype) return false;
  if (!Object.keys(value).every((key) => HEADER_KEYS.has(key))) return false;
  const { id, createdAt, cwd, parentSession, origin, delegationDepth, seedLength } = value;
  if (typeof id !== 'string' || id === '' || !wellFormed(id) || !Number.isFinite(createdAt)) return false;
  if (!optionalText(cwd, 0) || !optionalText(parentSession, 1) || (origin !== undefined && origin !== 'subagent')) return false;
  return optionalCount(delegationDepth) && optionalCount(seedLength);
}

const plainEnvelope = (event: unknown) =>
  isRecord(event) && typeof event['type'] === 'string' && event['type'] !== '' && wellFormed(event['type']) && Number.isFinite(event['time']);

/** One event in storage form: `data` is JSON text. */
export interface EncodedEvent {
  seq: number;
  type: string;
  time: number;
  data: string;
}

/** `path: message` for the first issue, e.g. `header.createdAt: Invalid input: expected number`. */
export function describeIssues(error: z.ZodError, root: string): string {
  return describeIssue(error, root);
}

/** A copy of `value` holding only the header fields present; absent ones are omitted, never undefined. */
export function buildHeader(value: {
  id: string;
  createdAt: number;
  cwd?: string | null | undefined;
  parentSession?: string | null | undefined;
  origin?: 'subagent' | null | undefined;
  delegationDepth?: number | null | undefined;
  seedLength?: number | null | undefined;
}): SessionHeader {
  const header: SessionHeader = { id: value.id, createdAt: value.createdAt };
  if (value.cwd != null) header.cwd = value.cwd;
  if (value.parentSession != null) header.parentSession = value.parentSession;
  if (value.origin != null) header.origin = value.origin;
  if (value.delegationDepth != null) header.delegationDepth = value.delegationDepth;
  if (value.seedLength != null) header.seedLength = value.seedLength;
  return header;
}

/** Validates a header handed to `create`; throws `INVALID_OPTIONS` naming the bad field. */
export function parseHeader(value: SessionHeader, hint = 'pass a SessionHeader with a non-empty id and a numeric createdAt'): SessionHeader {
  if (plainHeader(value)) return buildHeader(value);
  const header = parseOrThrow(headerSchema, value, 'INVALID_OPTIONS', 'header', hint);
  return buildHeader(header);
}

/**
 * Checks `events` against the session's next seq and encodes them. Throws before anything is
 * stored: `SEQ_MISMATCH` unless seqs run `nextSeq, nextSeq + 1, …`; `CORRUPT_DATA` when an
 * event's envelope is malformed or its data is not JSON.
 */
export function encodeEvents(
  id: SessionId,
  nextSeq: number,
  events: readonly SessionEvent[],
): EncodedEvent[] {
  if (!Array.isArray(events)) throw new SubagentError('INVALID_OPTIONS', `append(): events must be an array of session events, not ${describeKind(events)}`);
  const encoded: EncodedEvent[] = [];
  for (let index = 0; index < events.length; index++) {
    const event: unknown = events[index];
    // Not an event at all: refused as a malformed envelope, before its seq is read.
    if (!isRecord(event)) parseOrThrow(envelopeSchema, event, 'CORRUPT_DATA', `session "${printable(id)}" events[${index}]`);
    const expected = nextSeq + index;
    const { seq, data } = event as SessionEvent;
    if (seq !== expected) {
      throw new SubagentError(
        'SEQ_MISMATCH',
        `Session "${printable(id)}": events[${index}].seq is ${printable(seq)} but ${expected} was expected. ` +
          'Append contiguous seqs starting at the session length (reload the session if it changed).',
      );
    }
    const envelope = plainEnvelope(event) ? (event as SessionEvent) : parseOrThrow(envelopeSchema, event, 'CORRUPT_DATA', `session "${printable(id)}" events[${index}]`);
    encoded.push({ seq: expected, type: envelope.type, time: envelope.time, data: toJson(id, index, data) });
  }
  return encoded;
}

function toJson(id: SessionId, index: number, data: unknown): string {
  let text: string | undefined;
  let cause: unknown;
  try {
    text = JSON.stringify(data);
  } catch (error) {
    cause = error;
  }
  if (typeof text !== 'string') {
    throw new SubagentError(
      'CORRUPT_DATA',
      `Session "${id}": events[${index}].data cannot be stored as JSON. Event data must be plain JSON (no cycles, BigInt or undefined).`,
      { cause },
    );
  }
  return text;
}

/**
 * How many arrays and objects may enclose a value of stored event data: content's bound, and the
 * few levels of the event around it (a tool call's input sits inside a message's content).
 */
const MAX_STORED_DEPTH = MAX_CONTENT_DEPTH + 16;

const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Whether JSON `text` nests arrays and objects deeper than `limit`, read from the text itself (no
 * value is built, and text too short to nest that deep is not read at all).
 */
function jsonNestsDeeper(text: string, limit: number): boolean {
  if (text.length <= 2 * limit) return false;
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === BACKSLASH) index++;
      else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) inString = true;
    else if (code === OPEN_ARRAY || code === OPEN_OBJECT) {
      if (++depth > limit) return true;
    } else if (code === CLOSE_ARRAY || code === CLOSE_OBJECT) depth--;
  }
  return false;
}

/**
 * Decodes stored JSON text; throws `CORRUPT_DATA` naming the session and seq, also for data nested
 * deeper than any writer of this library stores (freezing, copying or sending it would overflow the stack).
 */
export function fromJson(id: SessionId, seq: number, text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch (error) {
    throw corrupt(id, `event ${seq} holds data that is not valid JSON`, error);
  }
  if (jsonNestsDeeper(text, MAX_STORED_DEPTH)) throw corrupt(id, `event ${seq} holds data nested more than ${MAX_STORED_DEPTH} levels deep`);
  return value;
}

/** `CORRUPT_DATA` for stored session `id`. */
export function corrupt(id: SessionId, what: string, cause?: unknown): SubagentError {
  return new SubagentError(
    'CORRUPT_DATA',
    `Stored session "${id}" is corrupt: ${what}. Restore it from a backup or delete the session.`,
    { cause },
  );
}

/** Checks that a loaded log satisfies `seq === index` and has `length` events. */
export function assertContiguous(id: SessionId, events: readonly SessionEvent[], length: number): void {
  for (const [index, event] of events.entries()) {
    if (event.seq !== index) throw corrupt(id, `event ${index} is missing (found seq ${event.seq} in its place)`);
  }
  if (events.length !== length) {
    throw corrupt(id, `the log holds ${events.length} events but its header records ${length}`);
  }
}

/** `UNKNOWN_SESSION` for an append to a session that was never created. */
export function unknownSession(id: SessionId): SubagentError {
  return new SubagentError('UNKNOWN_SESSION', `No session "${printable(id)}": create it before appending.`);
}

/** `DUPLICATE_SESSION` for a second `create` of the same id. */
export function duplicateSession(id: SessionId): SubagentError {
  return new SubagentError('DUPLICATE_SESSION', `Session "${printable(id)}" already exists: pick a new id or load it.`);
}

/** `INVALID_OPTIONS` unless `ids` (of `projections(ids)`) is an array. */
export function assertIdList(ids: unknown): void {
  if (!Array.isArray(ids)) throw new SubagentError('INVALID_OPTIONS', `projections(): ids must be an array of session ids, not ${describeKind(ids)}`);
}

/** `CLOSED` for any call after `close()`. */
export function closedError(operation: string): SubagentError {
  return SubagentError.closed('the session persistence', `${operation} needs an open store`);
}
