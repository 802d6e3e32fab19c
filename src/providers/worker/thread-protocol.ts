// The worker-thread transport of the child protocol: what a piscina task carries besides the
// encoded ChildTaskData (the run id, the shared cancel flag and input gate, maybe a hub port),
// what a thread answers, and the messages a thread posts on `parentPort` while it loads.
import type { MessagePort } from 'node:worker_threads';
import type { TreeHeadroom } from '../../seam/budget.js';
import type { Encoded } from '../../seam/codec.js';
import { headOf } from '../../seam/parse.js';
import type { ChildNotice, ChildTaskResult } from '../../seam/child-protocol.js';

/** The piscina task: `data` is an encoded `ChildTaskData` (a `ResidentTaskData` when `resident`). */
export interface WorkerTask {
  data: Encoded;
  /** A continuable child's stay: it takes turns until the host tells it to leave. */
  resident?: true;
  /**
   * Int32Array over a SharedArrayBuffer; index 0 becomes 1 when the child is cancelled. A child
   * busy in a long step never reads its port, so a cancel message alone could wait forever; the
   * agent's loop polls this flag at every step and tool boundary instead.
   */
  cancelFlag: Int32Array;
  /** The child's input gate (see `admitInput`), over the same SharedArrayBuffer. */
  inputGate: Int32Array;
  /**
   * The tree budgets covering the child, each tree's spend over its own SharedArrayBuffer: the child
   * adds what it spends and checks the tree at every step boundary, without waiting for a message.
   */
  trees?: TreeHeadroom[];
  /** A resident child's: what it added to `trees` ahead of its host-side log (see AheadTrees). */
  ahead?: BigInt64Array;
  /** The run's id: every message about this child on the thread's hub port names it. */
  run: string;
  /**
   * A port the thread adopts as its hub if it has none (a thread with a hub closes it). Sent while
   * the host knows no port at all, and again with a task a thread answered `need-port` (it had no hub).
   */
  port?: MessagePort;
}

/**
 * What a thread's task returns (encoded): the child's outcome, a request for a hub port, the end of
 * a child whose code let an error escape (`escaped`: the thread goes on without it, but retires),
 * or a retiring thread's refusal (`retired`: the task goes to another thread).
 */
export type ThreadTaskResult =
  | ChildTaskResult
  | { type: 'need-port' }
  | { type: 'escaped'; message: string; threadId: number }
  | { type: 'retired'; threadId: number };

/**
 * The value a thread's task returns: the encoded ThreadTaskResult and, for a child that ran, its
 * `end` notice, which rides here instead of on the hub port (one message fewer per child), with
 * the count of notices the child posted on the hub before it: the host applies `end` once that
 * many have arrived, since this value and the hub's messages travel on different ports.
 */
export type ThreadTaskReturn = Encoded & {
  end?: Extract<ChildNotice, { type: 'end' }>;
  notices?: number;
  /** The thread's id, when it retires and this was its last child task: the host ends it. */
  retire?: number;
};

/** Each thread's `workerData`: the pool's import gate (see import-gate.ts). */
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

/** Posted on `parentPort` when work a finished child left running in the thread first threw: the host warns. */
export interface ThreadLeftoverNotice {
  leftoverThrew: string;
  threadId: number;
}

export function isThreadLeftoverNotice(value: unknown): value is ThreadLeftoverNotice {
  return typeof value === 'object' && value !== null && typeof (value as Partial<ThreadLeftoverNotice>).leftoverThrew === 'string';
}

/**
 * Posted on `parentPort` by a retiring thread that has no child task left and did not say so on a
 * task's value (`retire` above): after leftover work threw in an idle thread, or when its last task
 * rejected. The host ends the thread.
 */
export interface ThreadRetireNotice {
  retireThread: number;
}

export function isThreadRetireNotice(value: unknown): value is ThreadRetireNotice {
  return typeof value === 'object' && value !== null && typeof (value as Partial<ThreadRetireNotice>).retireThread === 'number';
}

/** The error's message: an uncaught error reaches the host as a plain object when its class (say a DOMException) does not cross threads. */
export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  const { name, message } = (typeof error === 'object' && error !== null ? error : {}) as { name?: unknown; message?: unknown };
  if (typeof message === 'string') return typeof name === 'string' && name !== '' ? `${name}: ${message}` : message;
  return String(error);
}

/** The message of an error that escaped a child's code (any thrown value), at most 2000 characters. */
export function escapeMessage(error: unknown): string {
  let message: string;
  try {
    message = messageOf(error);
  } catch {
    message = 'a value that cannot be read';
  }
  return message.length > 2000 ? `${headOf(message, 2000)}…` : message;
}

/** The cancel flag and input gate of one child, in one SharedArrayBuffer. */
export function sharedFlags(): { cancelFlag: Int32Array; inputGate: Int32Array } {
  const buffer = new SharedArrayBuffer(8);
  return { cancelFlag: new Int32Array(buffer, 0, 1), inputGate: new Int32Array(buffer, 4, 1) };
}

// The input gate is one word: bit 0 is set once the child has closed its input, the rest counts
// the messages the host sent. Both change in one atomic step, so the host never counts a message
// after the child read the count, and a host's input call can refuse `CLOSED` at once, with no
// round trip: the child learns how many messages are still on their way and waits for them.

/** Host side: counts one message in, or returns false when the child no longer takes input. */
export function admitInput(gate: Int32Array): boolean {
  for (;;) {
    const word = Atomics.load(gate, 0);
    // Reached only when the child closes its input between the host's isOpen check and this count: a
    // cross-thread race the suite cannot order (a closed child is refused earlier, by isOpen).
    if ((word & 1) !== 0) return false;
    if (Atomics.compareExchange(gate, 0, word, word + 2) === word) return true;
  }
}

/** Host side: whether the child still takes input. */
export function inputOpen(gate: Int32Array): boolean {
  return (Atomics.load(gate, 0) & 1) === 0;
}

/** Child side: closes the gate; returns how many messages the host sent in all. */
export function closeInput(gate: Int32Array): number {
  return Atomics.or(gate, 0, 1) >>> 1;
}
