// What the host and its queue workers exchange through Redis for one child. The job (id = the
// child's session id) carries the encoded ChildTaskData and the host's reply stream; the worker
// appends the child's attach, event batches and final result to that stream, in order; the host
// publishes cancellations on the queue's cancel channel and marks them with a short-lived key, and
// a covering tree budget's stop likewise (the key holds the stop, the budget channel names the run).
import type { Encoded } from '../../seam/codec.js';
import type { SessionEvent } from '../../seam/session-types.js';
import type { SubagentResult } from '../../seam/types.js';

/** BullMQ's default key prefix; our own keys live beside the queue's. */
export const PREFIX = 'bull';
/** The BullMQ job name of every child. */
export const JOB_NAME = 'child';

export interface QueueJobData {
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

/** One entry of a reply stream (fields `run`, `kind`, `data` hold codec text). */
export type ReplyEntry =
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
