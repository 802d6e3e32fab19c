// The host side of one child on a pool thread, shared by the spawn/fork providers and the queue
// worker: it posts the task, routes the child's notices, serves its host calls, and cancels it
// (shared flag, control call, then the thread itself after the grace).
import { MessageChannel } from 'node:worker_threads';
import type { BudgetStop, TreeHeadroom } from '../../seam/budget.js';
import type { ChildControlApi, ChildTaskResult, HostApi } from '../../seam/child-protocol.js';
import { cancelFlagValue } from '../../seam/cancel-flag.js';
import { decodeOwned, type Encoded } from '../../seam/codec.js';
import type { ContentBlock, MessageId, MessageSource } from '../../seam/content.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import type { CancelCause, InboxTarget, SessionEvent } from '../../seam/session-types.js';
import type { SubagentResult } from '../../seam/types.js';
import type { WorkerPoolEngine } from './pool.js';
import { admitInput, inputOpen, sharedFlags, type ThreadTaskResult, type ThreadTaskReturn, type WorkerTask } from './thread-protocol.js';
import { EscapedError, describeThreadFailure } from './thread-failure.js';
import { routeNotices } from './notice-route.js';
import type { RunRoute } from './run-router.js';
import { GuardedRemote, exposeOn } from './wire-channel.js';

/** How often a task that never reached its child is sent again after its thread ended. */
const LOST_TASK_RETRIES = 3;

/** A task's outcome with its end notice and the count of hub notices before it (see ThreadTaskReturn). */
interface PoolOutcome {
  result: SubagentResult;
  failure?: ChildTaskResult['failure'];
  end: ThreadTaskReturn['end'];
  notices: number;
}

/**
 * A task to post, held only while it may have to be sent again: a thread answers `need-port` or
 * `retired` before its child attaches, so the caller may drop it (and its data) once the child has
 * attached.
 */
export interface HeldTask {
  task: Omit<WorkerTask, 'port'> | undefined;
}

/**
 * Runs a child task. While the router knows no port at all, the task offers a new one (a thread
 * without a hub adopts it, one with a hub closes it); a thread that has no hub yet and got no port
 * answers `need-port`, and the task is sent again with one. Each further thread so costs one round
 * trip once, where offering a port while some thread might lack one cost a channel per task: the
 * pool gives a lone task to the same idle thread, so a thread that never ran one kept the count of
 * hubs below the count of threads for good. A retiring thread
 * answers `retired`, and the task goes to another, as does a task whose thread ended before its
 * child attached. A child whose code let an error escape rejects with an `EscapedError`; the last
 * task of a retiring thread asks the pool to end that thread.
 */
export async function runOnPool(pool: WorkerPoolEngine, held: HeldTask): Promise<PoolOutcome> {
  const wantsPort = () => pool.channels.ports === 0;
  for (let offer = wantsPort(), lost = 0; ; ) {
    let value: ThreadTaskReturn;
    try {
      value = await post(pool, held, offer);
    } catch (error) {
      // The child's first notice, `attach`, may still be queued on the hub: its thread's death may be
      // reported first. A task that never reached its child when its thread ended (it died, or
      // retired) did not run, so it goes to another thread; a few times at most, should threads
      // keep dying under it. The pool's own refusals (closed, no thread can load) are final.
      pool.channels.drain();
      if (held.task && !isSubagentError(error) && ++lost <= LOST_TASK_RETRIES) {
        offer = wantsPort();
        continue;
      }
      throw error;
    }
    if (value.retire !== undefined) pool.retireThread(value.retire);
    const outcome = decodeOwned<ThreadTaskResult>(value);
    if (outcome.type === 'result') return { result: outcome.result, ...(outcome.failure ? { failure: outcome.failure } : {}), end: value.end, notices: value.notices ?? 0 };
    if (outcome.type === 'escaped') {
      pool.avoidThread(outcome.threadId);
      throw new EscapedError(outcome.message);
    }
    if (outcome.type === 'retired') {
      pool.avoidThread(outcome.threadId);
      offer = wantsPort();
    } else {
      offer = true; // need-port
    }
  }
}

/** Posts the held task, with a new hub port when `offer`; nothing of the task stays in the caller's frame. */
function post(pool: WorkerPoolEngine, held: HeldTask, offer: boolean): Promise<ThreadTaskReturn> {
  const task = held.task;
  if (!task) throw new SubagentError('START_FAILED', 'a thread asked for its task again after the child had attached');
  if (!offer) return pool.run(task, held);
  const { port1, port2 } = new MessageChannel();
  // A port offered to a task that never ran stays with the router (unref'd) until the pool closes.
  pool.channels.listen(port1, { unref: true });
  return pool.run({ ...task, port: port2 }, held);
}

/** Where a thread child's notices go, as they arrive (synchronously, in order). */
export interface ChildSink {
  /** A thread took the child. */
  attach(threadId: number): void;
  /** The child's new session events, in order. */
  events(events: SessionEvent[]): void;
}

/** How a thread child ended: its own outcome, or its thread's death. */
export type ThreadOutcome =
  | { type: 'result'; result: SubagentResult; failure?: ChildTaskResult['failure'] }
  | { type: 'thread-failed'; error: unknown; diagnostic: string; aborted: boolean };

/**
 * queued: posted, no thread yet · attached: a thread runs it · cancelling: cancel sent (with or
 * without a thread), grace running · terminated: the grace passed and its thread was ended ·
 * ended: the task settled.
 */
export type ThreadChildState = 'queued' | 'attached' | 'cancelling' | 'terminated' | 'ended';

export class ThreadChild {
  /** Set to 1 on cancel; the child's loop polls it (see WorkerTask.cancelFlag). */
  readonly #cancelFlag: Int32Array;
  /** Counts input sent; the child closes it when it ends (see thread-protocol.ts). */
  readonly #inputGate: Int32Array;
  readonly #pool: WorkerPoolEngine;
  readonly #route: RunRoute;
  readonly #control: GuardedRemote<ChildControlApi>;
  /** The task until the child attaches (see HeldTask): a run in flight does not keep its request's copy. */
  readonly #held: HeldTask;
  #state: ThreadChildState = 'queued';
  #threadId: number | undefined;
  #killTimer: NodeJS.Timeout | undefined;
  /** The grace after a cancel passed before any thread was known to run the child. */
  #graceSpent = false;
  /** Why it was cancelled, for the turn it ends (its agent's cancel may name the user). */
  #cause: CancelCause = { kind: 'parent' };
  /** Settles once every notice of the child is in: the result never overtakes its events. */
  readonly outcome: Promise<ThreadOutcome>;

  /**
   * Posts the task at once; `onTaskEnd` runs when the thread is done with it, before `outcome`.
   * `trees`: the tree budgets the child adds its spend to and checks (see WorkerTask.trees).
   */
  constructor(pool: WorkerPoolEngine, run: string, data: Encoded, host: HostApi, sink: ChildSink, onTaskEnd?: () => void, trees?: TreeHeadroom[]) {
    this.#pool = pool;
    ({ cancelFlag: this.#cancelFlag, inputGate: this.#inputGate } = sharedFlags());
    this.#route = pool.channels.route(run);
    exposeOn(host, this.#route.endpoint('host'));
    this.#control = new GuardedRemote<ChildControlApi>(this.#route.endpoint('control'));
    const noticesIn = routeNotices(this.#route, this.#control, (notice) => {
      if (notice.type === 'events') sink.events(notice.events);
      else if (notice.type === 'attach') this.#attach(notice.threadId, sink);
    });
    this.#held = { task: { data, cancelFlag: this.#cancelFlag, inputGate: this.#inputGate, run: this.#route.id, ...(trees ? { trees } : {}) } };
    const task = runOnPool(pool, this.#held);
    this.outcome = task.then(
      async ({ result, failure, end, notices }): Promise<ThreadOutcome> => {
        this.#end(onTaskEnd);
        // The task's value may overtake the hub's notices (piscina answers on its own port); its
        // end notice, the child's last events, applies after them.
        await noticesIn(notices);
        if (end && end.events.length > 0) sink.events(end.events);
        return { type: 'result', result, ...(failure ? { failure } : {}) };
      },
      (error: unknown): ThreadOutcome => {
        const killed = this.#state === 'terminated';
        const aborted = killed || this.#state === 'cancelling';
        this.#end(onTaskEnd);
        // A thread that died had posted its last notices first, but its death may be reported first.
        pool.channels.drain();
        const diagnostic = describeThreadFailure(error, killed, pool.options.cancelGraceMs);
        return { type: 'thread-failed', error, diagnostic, aborted };
      },
    );
  }

  #attach(threadId: number, sink: ChildSink): void {
    this.#threadId = threadId;
    this.#held.task = undefined;
    if (this.#state === 'queued') this.#state = 'attached';
    else if (this.#state === 'cancelling') {
      // Cancelled before its attach was known here (a start aborted while this thread was busy):
      // the control call sent then may have found no port, and a child that ignores the flag
      // (waiting on its signal, or in a loop) must still lose its thread after a grace.
      this.#sendCancel();
      if (this.#graceSpent) this.#killTimer = setTimeout(() => this.#kill(), this.#pool.options.cancelGraceMs);
    }
    sink.attach(threadId);
  }

  #end(onTaskEnd: (() => void) | undefined): void {
    if (this.#state !== 'terminated') this.#state = 'ended';
    clearTimeout(this.#killTimer);
    onTaskEnd?.();
  }

  /**
   * Stops the child: the flag lands at its next step or tool boundary, the control call wakes a
   * child waiting on I/O. A child that ignores both (a synchronous loop) loses its thread after the
   * pool's grace, unless its task ended meanwhile: by then the thread may run another child.
   */
  cancel(cause: CancelCause = { kind: 'parent' }): void {
    if (this.#state !== 'queued' && this.#state !== 'attached') return;
    this.#state = 'cancelling';
    this.#cause = cause;
    Atomics.store(this.#cancelFlag, 0, cancelFlagValue(cause));
    this.#sendCancel();
    this.#killTimer = setTimeout(() => this.#kill(), this.#pool.options.cancelGraceMs);
  }

  #sendCancel(): void {
    const cause = this.#cause;
    this.#control.call((remote) => remote.cancel(cause)).catch(() => undefined);
  }

  #kill(): void {
    const threadId = this.#threadId;
    // Not known to be taken by a thread yet: one that takes it sees the flag at its start, and if
    // it had taken it already, its attach (see #attach) arms a new grace.
    if (threadId === undefined) {
      this.#graceSpent = true;
      // A thread that never took it is ended once every task there is given up (see WorkerPoolEngine.giveUp).
      this.#pool.giveUp(this.#held, () => this.#state === 'cancelling' && this.#threadId === undefined);
      return;
    }
    void this.#pool.terminateThread(threadId, () => {
      if (this.#state !== 'cancelling') return false;
      this.#state = 'terminated';
      return true;
    });
  }

  /** Why it was cancelled (the parent's unless its agent's cancel named another cause). */
  get cause(): CancelCause {
    return this.#cause;
  }

  /** False once the child has closed its input (it is about to return). */
  get takesInput(): boolean {
    return inputOpen(this.#inputGate);
  }

  /**
   * Throws `CLOSED` at once when the child has closed its input; otherwise resolves once the
   * child's log holds the message, or rejects `CLOSED` if its thread is lost first.
   */
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): Promise<void> {
    if (!admitInput(this.#inputGate)) throw new SubagentError('CLOSED', `child ${this.#route.id} has finished; its worker no longer takes input`);
    // Posted in this same step: the child, having counted this message, waits for it.
    return this.#control.call((remote) => remote.deliver(target, id, content, wake, source));
  }

  /** A tree budget covering the child is spent (best effort: a child that ended needs no stop). */
  budgetStop(stop: BudgetStop): void {
    this.#control.call((remote) => remote.budgetStop(stop)).catch(() => undefined);
  }

  /**
   * Gives up on a child nobody will wait for: cancelled as by `cancel()` (a thread may have taken it
   * already), so its slot comes back. Its route stays until the task ends, so a call the child
   * makes meanwhile is answered instead of hanging it.
   */
  abandon(): void {
    this.cancel();
    void this.outcome.then(() => this.release());
  }

  /** Ends the run's routing; pending control calls reject `CLOSED`. */
  release(): void {
    clearTimeout(this.#killTimer);
    this.#control.close();
    this.#route.dispose();
  }
}
