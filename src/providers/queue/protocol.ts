// What the host and its queue workers exchange through Redis for one child. The job (id = the
// child's session id) carries the encoded ChildTaskData and the host's reply stream; the worker
// appends the child's attach, event batches and final result to that stream, in order; the host
// publishes cancellations on the queue's cancel channel and marks them with a short-lived key, and
// a covering tree budget's stop likewise (the key holds the stop, the budget channel names the run).
// Both sides declare PROTOCOL_VERSION: a job or a reply of another version is refused, not misread.
import type { Encoded } from '../../seam/codec.js';
import { describeKind, plainJsonProblem } from '../../seam/content.js';
import { headOf, isRecord, wellFormed } from '../../seam/parse.js';
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
 * Version 3: a task's fork seed is a list of texts, one per event (it was one text).
 */
export const PROTOCOL_VERSION = 3;

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

/** What to check about a job that no host of this version queues. */
export const JOB_HINT = 'is something other than a subagent-host host of this version adding jobs to its queue?';

/** What to check about a reply entry that no worker of this version writes. */
export const MALFORMED_HINT = 'is something other than a subagent-host worker of this version writing to its Redis?';

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

const STOP_REASONS: readonly unknown[] = ['completed', 'aborted', 'error', 'max-tokens', 'refusal'] satisfies SubagentResult['stopReason'][];

const count = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
export const attemptNumber = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 1;

/** A value named in a message: a short JSON rendering (control characters escaped), or its kind. */
function shown(value: unknown): string {
  try {
    const json = JSON.stringify(value);
    if (typeof json === 'string') return json.length > 80 ? `${headOf(json, 80)}…` : json;
  } catch {
    // A cycle or a BigInt: its kind says enough.
  }
  return describeKind(value);
}

function eventProblem(event: unknown, index: number): string | undefined {
  const at = `events[${index}]`;
  if (!isRecord(event)) return `${at} is ${describeKind(event)}, not a session event`;
  if (!count(event['seq'])) return `${at}.seq is ${shown(event['seq'])}, not a count`;
  const type = event['type'];
  if (typeof type !== 'string' || type === '' || !wellFormed(type)) return `${at}.type is ${shown(type)}, not an event type`;
  if (typeof event['time'] !== 'number' || !Number.isFinite(event['time'])) return `${at}.time is ${shown(event['time'])}, not a time`;
  return undefined;
}

function resultProblem(result: unknown): string | undefined {
  if (!isRecord(result)) return `its result is ${describeKind(result)}, not a SubagentResult`;
  const { output, stopReason, diagnostic, structured } = result;
  if (!STOP_REASONS.includes(stopReason)) return `result.stopReason is ${shown(stopReason)}, not one of ${STOP_REASONS.join(', ')}`;
  if (!Array.isArray(output)) return `result.output is ${describeKind(output)}, not an array of content blocks`;
  const block = output.findIndex((item) => !isRecord(item) || typeof item['type'] !== 'string');
  if (block >= 0) return `result.output[${block}] is not a content block`;
  if (diagnostic !== undefined && typeof diagnostic !== 'string') return `result.diagnostic is ${describeKind(diagnostic)}, not text`;
  return plainJsonProblem(output, 'result.output') ?? (structured === undefined ? undefined : plainJsonProblem(structured, 'result.structured'));
}

/**
 * Why a decoded entry of this protocol version is not a reply entry as this version writes them
 * (an unknown kind, a field missing or of another type), or undefined when it is one. The host reads
 * no entry before this check passes: whoever can write to Redis can write to a reply stream.
 * Only what the host reads is checked (each event's envelope, not its data).
 */
export function replyProblem(entry: Record<string, unknown>): string | undefined {
  const { kind } = entry;
  if (kind === 'attach') {
    const placement = entry['placement'];
    if (!isRecord(placement)) return `its placement is ${describeKind(placement)}, not an object`;
    if (typeof placement['hostname'] !== 'string') return `placement.hostname is ${shown(placement['hostname'])}, not text`;
    for (const field of ['pid', 'threadId'] as const) if (!count(placement[field])) return `placement.${field} is ${shown(placement[field])}, not a count`;
    return attemptNumber(placement['attempt']) ? undefined : `placement.attempt is ${shown(placement['attempt'])}, not an attempt number`;
  }
  if (kind !== 'events' && kind !== 'end') return `its kind is ${shown(kind)}, not attach, events or end`;
  if (!attemptNumber(entry['attempt'])) return `its attempt is ${shown(entry['attempt'])}, not an attempt number`;
  if (kind === 'end') return resultProblem(entry['result']);
  const events = entry['events'];
  if (!Array.isArray(events)) return `its events are ${describeKind(events)}, not an array`;
  for (let index = 0; index < events.length; index++) {
    const problem = eventProblem(events[index], index);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/** Whether `reply` names a host's reply stream on `queue` (the only keys a worker appends to). */
export function isReplyKey(queue: string, reply: unknown): reply is string {
  const prefix = replyKey(queue, '');
  return typeof reply === 'string' && reply.length > prefix.length && reply.startsWith(prefix);
}

/**
 * Why a worker does not run a job, or undefined when it does: one of another protocol version (it
 * would misread it), or one of this version that no host of it queues. Whoever can write to Redis
 * can queue a job: a reply naming any other key (BullMQ's own event stream, another queue's host)
 * would have the child's replies appended there, and an attempt that is not an attempt number would
 * be echoed in entries no host accepts.
 */
export function jobProblem(data: unknown, queue: string): string | undefined {
  if (!ownProtocol(data)) return `it was queued by a host speaking queue protocol ${protocolText(data)}, and this worker speaks ${PROTOCOL_VERSION}; ${SAME_VERSION_HINT}`;
  // Declaring this version, it is an object (see `declared`).
  const { task, reply, attempt } = data as Record<string, unknown>;
  if (!isRecord(task)) return `its task is ${describeKind(task)}, not an encoded child task; ${JOB_HINT}`;
  if (!isReplyKey(queue, reply)) return `its reply is ${shown(reply)}, not the name of a reply stream of queue ${queue}; ${JOB_HINT}`;
  if (!attemptNumber(attempt)) return `its attempt is ${shown(attempt)}, not an attempt number; ${JOB_HINT}`;
  return undefined;
}

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
