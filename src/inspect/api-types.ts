// The JSON the inspect server answers and its page reads: one vocabulary for both sides, types only
// (the page bundle imports nothing else from the package).

/** Token counts summed over a session's own assistant messages (a fork's seed left out), when its model reported them. */
export interface UsageTotals {
  inputTokens: number;
  outputTokens: number;
}

/** `GET /api/roots`: sessions without a parent, newest first. */
export interface RootSummary {
  id: string;
  createdAt: number;
  /** Direct children of any origin. */
  children: number;
  /** The start of the root's first user message, if it has one. */
  title?: string;
  events: number;
}

/** What a child's log says about its activity: a turn is open, or none is. */
export type Activity = 'running' | 'inactive';

/** One descendant of a root, in tree (pre-order) order. */
export interface ChildNode {
  id: string;
  parentId: string;
  depth: number;
  createdAt: number;
  /** Absent for a session below the root that is not a delegated child (origin not `subagent`). */
  mode?: 'one-shot' | 'continuable';
  label?: string;
  provider?: string;
  activity: Activity;
  /** How the last turn ended (`completed`, `aborted`, `error`, …); absent while the first turn runs. */
  stopReason?: string;
  /** Time of the last `turn/end`, when no turn is open after it. */
  settledAt?: number;
  /** Time of the last event. */
  lastEventAt?: number;
  events: number;
  /** Busy time of settled turns (the stored timing projection). */
  busyMs?: number;
  usage?: UsageTotals;
  /** Set when the session's rows cannot be read; the rest of the tree is still shown. */
  problem?: string;
}

/** `GET /api/roots/:id/tree[?offset=N][&limit=N]`: the descendants from `offset` (default 0), at most `limit` (default 1000, at most 10,000). */
export interface TreeResponse {
  root: RootSummary;
  nodes: ChildNode[];
  /** Descendants in all: more than `offset + nodes.length` when this answer stopped at its limit. */
  total: number;
  /** The server's clock when it answered, so running bars grow from a shared origin. */
  now: number;
}

/** One item of a transcript, already reduced to text (the page renders it as text only). */
export interface TranscriptEntry {
  seq: number;
  time: number;
  kind:
    | 'message'
    | 'assistant'
    | 'tool-call'
    | 'tool-result'
    | 'report'
    | 'notice'
    | 'inbox'
    | 'turn-start'
    | 'turn-end'
    | 'descriptor'
    | 'seed'
    | 'event'
    | 'unreadable';
  title: string;
  /** The body; the page folds long ones. For an `unreadable` row, why it cannot be read. */
  text?: string;
  /**
   * Characters cut from the end of `text` (each text is capped, and so is a response's total): the
   * whole body of an event's entry is at `GET /api/sessions/:id/events/:seq` (plain text).
   */
  omitted?: number;
  isError?: boolean;
}

/**
 * `GET /api/sessions/:id[?after=SEQ][&limit=N]`: the entries of the events after seq `after` (from
 * the start without it), at most `limit` (default 1000, at most 10,000). A fork's inherited prefix is
 * one entry: an `after` inside it answers from the start.
 */
export interface TranscriptResponse {
  id: string;
  parentId?: string;
  createdAt: number;
  entries: TranscriptEntry[];
  /** The seq of the last event this answer read (absent when it read none): `?after=` it for what follows. */
  through?: number;
  /** Set when the log has events past `through` that this answer left out (it reached its limit, or read 100,000 events). */
  more?: true;
  /** Of the whole log, whatever part this answer sends. */
  usage?: UsageTotals;
}

/** Every error answer: `{ error: { code, message } }`. */
export interface ErrorResponse {
  error: { code: string; message: string };
}
