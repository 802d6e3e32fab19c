// What the host and its queue workers exchange through Redis for one child. The job (id = the
// child's session id) carries the encoded ChildTaskData and the host's reply stream; the worker
// appends the child's attach, event batches and final result to that stream, in order; the host
// publishes cancellations on the queue's cancel channel and marks them with a short-lived key, and
// a covering tree budget's stop likewise (the key holds the stop, the budget channel names the run).
// Both sides declare PROTOCOL_VERSION: a job or a reply of another version is refused, not misread.
import type { Encoded } from '../../seam/codec.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { SubagentResult } from '../../seam/types.js';

/** BullMQ's default key prefix; our own keys live beside the queue's. */
export const PREFIX = 'bull';
/** The BullMQ job name of every child. */
export const JOB_NAME = 'child';

/**
 * The version of what hosts and workers exchange: the job data, the reply entries, and what they
 * mean (an option a worker must honour, an entry a host must read as the worker meant it). Bump it
 * with any change a side of the previous version would misread or silently ignore, such as a new
 * field of ChildTaskData a worker must enforce. A worker refuses a job of another version and a
 * host a reply of another; jobs and replies without the field are version 1, the protocol before it.
 */
export const PROTOCOL_VERSION = 2;

function declared(value: unknown): unknown {
  return typeof value === 'object' && value !== null && 'protocol' in value ? value.protocol : 1;
}

/** Whether a job's data or a reply entry declares this side's PROTOCOL_VERSION. */
export function ownProtocol(value: unknown): boolean {
  return declared(value) === PROTOCOL_VERSION;
}

/** The version a job's data or a reply entry declares, as text for a message (1 when it declares none). */
export function protocolText(value: unknown): string {
  const version = declared(value);
  return typeof version === 'number' ? String(version) : (JSON.stringify(version) ?? String(version)).slice(0, 40);
}

/** What to do about a job or a reply of another version. */
export const SAME_VERSION_HINT = 'run the same subagent-host version on hosts and workers';

export interface QueueJobData {
  /** PROTOCOL_VERSION of the host that queued the job. */
  protocol: number;
  /** An encoded ChildTaskData. */
  task: Encoded;
  /** The host's reply stream (appended with NOMKSTREAM: a host that is gone gets nothing). */
  reply: string;
  /** 1 for the first run, then one more per restart. */
  attempt: number;
}

/** Where a child runs: reported by the worker when a thread takes it. */
export interface Placement {
  hostname: string;
  pid: number;
  threadId: number;
  attempt: number;
}

/**
 * One entry of a reply stream (its field `e` holds the entry's codec text), with the worker's
 * PROTOCOL_VERSION. A worker refuses a job of another version with an `end`, a shape every version
 * has had, so a host of an earlier version still settles the run with the refusal's diagnostic.
 */
export type ReplyEntry = ReplyBody & { protocol: number };

/** A reply entry before the worker declares its version. */
export type ReplyBody =
  | { run: string; kind: 'attach'; placement: Placement }
  | { run: string; kind: 'events'; attempt: number; events: SessionEvent[] }
  | { run: string; kind: 'end'; attempt: number; result: SubagentResult };

export function replyKey(queue: string, hostId: string): string {
  return `${PREFIX}:${queue}:sah:reply:${hostId}`;
}

export function cancelChannel(queue: string): string {
  return `${PREFIX}:${queue}:sah:cancel`;
}

export function cancelKey(queue: string, run: string): string {
  return `${PREFIX}:${queue}:sah:cancelled:${run}`;
}

export function budgetChannel(queue: string): string {
  return `${PREFIX}:${queue}:sah:budget`;
}

/** Holds the stop (codec text of a BudgetStop) of a spent tree budget covering the run. */
export function budgetKey(queue: string, run: string): string {
  return `${PREFIX}:${queue}:sah:budget:${run}`;
}

/** BullMQ's lock of an active job: present while its worker is alive and renewing it. */
export function lockKey(queue: string, run: string): string {
  return `${PREFIX}:${queue}:${run}:lock`;
}
