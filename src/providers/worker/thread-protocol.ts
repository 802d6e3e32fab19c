// The worker-thread transport of the child protocol: what a piscina task carries besides the
// encoded ChildTaskData (the run id, the shared cancel flag, maybe a hub port), what a thread
// answers, and the messages a thread posts on `parentPort` while it loads.
import type { MessagePort } from 'node:worker_threads';
import type { Encoded } from '../../seam/codec.js';
import type { ChildTaskResult } from '../../seam/child-protocol.js';

/** The piscina task: `data` is an encoded `ChildTaskData`. */
export interface WorkerTask {
  data: Encoded;
  /**
   * Int32Array over a SharedArrayBuffer; index 0 becomes 1 when the child is cancelled. A child
   * busy in a long step never reads its port, so a cancel message alone could wait forever; the
   * agent's loop polls this flag at every step and tool boundary instead.
   */
  cancelFlag: Int32Array;
  /** The run's id: every message about this child on the thread's hub port names it. */
  run: string;
  /**
   * A port the thread adopts as its hub if it has none (a thread with a hub closes it). Sent while
   * the host knows fewer hubs than threads; a thread without a hub answers `need-port`.
   */
  port?: MessagePort;
}

/** What a thread's task returns (encoded): the child's outcome, or a request for a hub port. */
export type ThreadTaskResult = ChildTaskResult | { type: 'need-port' };

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
