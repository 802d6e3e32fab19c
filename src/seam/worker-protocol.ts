// What crosses the worker boundary (types, and one guard). The task data travels encoded by the
// codec; the thread's hub port carries the run's Comlink calls each way plus one-way notices (see
// wire-channel.ts); a SharedArrayBuffer flag carries cancellation into a busy thread.
import type { MessagePort } from 'node:worker_threads';
import type { AgentOptions, JsonSchema, ToolRestriction } from './agent-types.js';
import type { BudgetStop } from './budget.js';
import type { Encoded } from './codec.js';
import type { ContentBlock, MessageId } from './content.js';
import type { SubagentDescriptorData } from './descriptor.js';
import type { CancelCause, InboxTarget, SessionEvent, SessionHeader } from './session-types.js';
import type { SubagentResult } from './types.js';

/** The piscina task: `data` is an encoded `ChildTaskData`. */
export interface WorkerTask {
  data: Encoded;
  /** Int32Array over a SharedArrayBuffer; index 0 becomes 1 when the child is cancelled. */
  cancelFlag: Int32Array;
  /** The run's id: every message about this child on the thread's hub port names it. */
  run: string;
  /**
   * A port the thread adopts as its hub if it has none (a thread with a hub closes it). Sent while
   * the host knows fewer hubs than threads; a thread without a hub answers `{ needPort: true }`.
   */
  port?: MessagePort;
}

/** One-way messages from the worker, in order, on the `notice` lane. */
export type ChildNotice =
  /** Sent first: the task has a thread (so a runaway child's thread can be terminated). */
  | { type: 'attach'; threadId: number }
  /** The child's new session events, batched. */
  | { type: 'events'; events: SessionEvent[] }
  /** Sent last, before the task returns: every event has been sent. */
  | { type: 'end' };

export interface HostToolSchema {
  name: string;
  description: string;
  parameters: JsonSchema;
  concurrencySafe?: boolean;
}

export interface ChildTaskData {
  header: SessionHeader;
  /**
   * A fork's completed-turn prefix as codec text (`stringify`), or '' for spawn. Text is cheap to
   * send, and a parent forking several children with one prefix encodes it once.
   */
  seed: string;
  prompt: ContentBlock[];
  agentOptions: AgentOptions;
  /** Its `budget` (if any) is enforced in the thread, wall time from `header.createdAt`. */
  descriptor: SubagentDescriptorData;
  outputSchema?: JsonSchema;
  toolFilter?: ToolRestriction;
  /** Host tools the child may call (already filtered by `toolFilter` on the main side). */
  hostTools: HostToolSchema[];
}

/** Served by the main thread for one child (`host` lane). */
export interface HostApi {
  /** Runs a host tool for the child; the main side enforces the tool filter again. */
  callTool(name: string, input: unknown, callId: string): Promise<{ content: ContentBlock[]; isError?: boolean }>;
}

/** Served by the worker for one child (`control` lane). */
export interface ChildControlApi {
  cancel(cause: CancelCause): void;
  /** Delivers input to the child's inbox under the id the host already returned. */
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean): void;
  /** A tree budget covering the child reached a limit: stop at the next step boundary. */
  budgetStop(stop: BudgetStop): void;
}

/** What the task returns (encoded): the child's raw terminal outcome, or a request for a hub port. */
export type ChildTaskResult = { result: SubagentResult } | { needPort: true };

/** Each thread's `workerData`: the pool's import gate (see providers/worker/import-gate.ts). */
export interface WorkerThreadData {
  importGate: SharedArrayBuffer;
}

/** Posted on `parentPort` as the worker entry's last top-level step: the thread has loaded it. */
export interface ThreadLoadedNotice {
  threadLoaded: number;
  /** The import-gate slot the thread claimed. */
  slot: number;
}

export function isThreadLoadedNotice(value: unknown): value is ThreadLoadedNotice {
  const notice = value as Partial<ThreadLoadedNotice> | null;
  return typeof notice === 'object' && notice !== null && typeof notice.threadLoaded === 'number' && typeof notice.slot === 'number';
}
