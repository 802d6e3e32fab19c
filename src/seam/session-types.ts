// Session vocabulary: headers, events and the data each built-in event type carries. A session is an
// append-only log; `seq` equals the event's index. Event data is lossless JSON.
import type { ContentBlock, MessageId, MessageSource, SessionId } from './content.js';

/** Written once when a session is created; stored outside the log. */
export interface SessionHeader {
  id: SessionId;
  /** Epoch milliseconds. */
  createdAt: number;
  cwd?: string;
  /** The delegating parent's session (lineage). */
  parentSession?: SessionId;
  /** `'subagent'` marks a delegated child (what the catalog lists). */
  origin?: 'subagent';
  /** 0/absent at top level; parent + 1 for a child. Persisted so a resumed child keeps its budget. */
  delegationDepth?: number;
  /** Number of leading events inherited from a fork parent. */
  seedLength?: number;
}

export interface SessionEvent<T = unknown> {
  seq: number;
  /** Epoch milliseconds. */
  time: number;
  type: string;
  data: T;
}

/** Why an agent's activity was cancelled. */
export type CancelCause =
  | { kind: 'user' }
  | { kind: 'parent' }
  | { kind: 'hook'; reason: string }
  | { kind: 'disposed' };

/** A model or runtime failure as recorded in the log. */
export interface FailureInfo { code: string; message: string; status?: number }

/** How a turn ended: the outcome record of every turn. */
export type TurnEndReason =
  | { kind: 'completed' }
  | { kind: 'max-tokens' }
  | { kind: 'refusal' }
  | { kind: 'interrupted' }
  | { kind: 'aborted'; cause: CancelCause }
  | { kind: 'error'; error: FailureInfo };

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens?: number;
  reasoningTokens?: number;
}

/** Which inbox list a message was accepted into. */
export type InboxTarget = 'next-turn' | 'next-step';

/** Data of each built-in event type. Other types may be appended with any JSON data. */
export interface SessionEventMap {
  'turn/start': { turn: number };
  'turn/end': { turn: number; reason: TurnEndReason };
  'step/start': { turn: number; step: number };
  'step/end': { turn: number; step: number };
  'user/message': { id: MessageId; content: ContentBlock[]; source: MessageSource };
  'assistant/chunk': { turn: number; step: number; chunk: { type: 'text-delta' | 'reasoning-delta'; text: string } };
  'assistant/message': {
    turn: number;
    step: number;
    id: MessageId;
    content: ContentBlock[];
    usage?: Usage;
    interrupted?: boolean;
  };
  'tool/call': { turn: number; step: number; callId: string; name: string; input: unknown };
  'tool/result': {
    turn: number;
    step: number;
    callId: string;
    name: string;
    content: ContentBlock[];
    isError?: boolean;
    code?: string;
  };
  /** `wake: false`: input that starts no turn by itself (`inject`); a restored agent does not wake for it alone. */
  'inbox/accepted': { id: MessageId; target: InboxTarget; content: ContentBlock[]; source: MessageSource; wake?: false };
  'inbox/discarded': { ids: MessageId[] };
  'session/end-seed': Record<string, never>;
  'subagent/descriptor': unknown;
}

export type KnownEventType = keyof SessionEventMap;

/** The marker a fork's log has right after its seed: events before it are inherited, not its own. */
export const SEED_END_EVENT = 'session/end-seed';

/** How many events of a log are not its own: a fork's seed and the marker after it (0 for any other log). */
export function inheritedCount(header: { readonly seedLength?: number | undefined }): number {
  const seedLength = header.seedLength ?? 0;
  return seedLength > 0 ? seedLength + 1 : 0;
}
