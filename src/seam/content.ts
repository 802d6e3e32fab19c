// Content blocks and message sources: the data every message, tool result and subagent output is
// made of. All of it is plain JSON-safe data so it can cross threads, processes and SQLite.
import { randomUUID } from 'node:crypto';

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
  return { type: 'text', text: value };
}

/** The concatenated text of the `text` blocks of `content`. */
export function textOf(content: readonly ContentBlock[]): string {
  let out = '';
  for (const block of content) if (block.type === 'text') out += block.text;
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
