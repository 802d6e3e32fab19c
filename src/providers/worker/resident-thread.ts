// One stay of a continuable child on a pool thread, host side: it posts the resident task, routes
// its notices, serves its host calls and ends it with `leave`, or by terminating the thread when the
// child does not stop within the pool's grace (a runaway turn, a stay that ignores `leave`).
import { randomUUID } from 'node:crypto';
import type { AheadTrees } from '../../seam/budget.js';
import type { HostApi, ResidentControlApi, ResidentHostTools, ResidentMessage } from '../../seam/child-protocol.js';
import type { Encoded } from '../../seam/codec.js';
import { SubagentError } from '../../seam/errors.js';
import { within } from '../../seam/once.js';
import type { CancelCause, SessionEvent } from '../../seam/session-types.js';
import type { WorkerPoolEngine } from './pool.js';
import { runOnPool, type HeldTask, type ThreadOutcome } from './thread-child.js';
import { describeThreadFailure } from './thread-failure.js';
import { routeNotices } from './notice-route.js';
import { sharedFlags } from './thread-protocol.js';
import type { RunRoute } from './run-router.js';
import { GuardedRemote, exposeOn } from './wire-channel.js';

export class ResidentThread {
  readonly #pool: WorkerPoolEngine;
  readonly #route: RunRoute;
  readonly #control: GuardedRemote<ResidentControlApi>;
  readonly #cancelFlag: Int32Array;
  /** The stay's task until it attaches (see HeldTask). */
  readonly #held: HeldTask;
  #threadId: number | undefined;
  #killTimer: NodeJS.Timeout | undefined;
  #killed = false;
  /** The grace after a leave passed before any thread was known to run the stay. */
  #graceSpent = false;
  /**
   * Resolves once a thread has taken the stay: what is posted to the child before that is dropped
   * (its route has no port yet), so calls that may come first (leave, closeOwnInput) wait for it.
   */
  readonly #attached: Promise<void>;
  #over = false;
  /** Resolves once the child's agent is built; rejects if the stay ends first. */
  readonly ready: Promise<void>;
  /** Settles once the task has ended and every notice of it is in. */
  readonly ended: Promise<ThreadOutcome>;

  /**
   * Posts the task at once; `onTaskEnd` runs when the thread is done with it, before `ended`.
   * `trees`: the tree budgets the child adds its spend to and checks (see WorkerTask.trees).
   */
  constructor(pool: WorkerPoolEngine, data: Encoded, host: HostApi, onEvents: (events: SessionEvent[]) => void, onTaskEnd: () => void, trees?: AheadTrees) {
    this.#pool = pool;
    const { cancelFlag, inputGate } = sharedFlags();
    this.#cancelFlag = cancelFlag;
    this.#route = pool.channels.route(randomUUID());
    let built!: () => void;
    const ready = new Promise<void>((resolve) => (built = resolve));
    let attached!: () => void;
    this.#attached = new Promise<void>((resolve) => (attached = resolve));
    exposeOn(host, this.#route.endpoint('host'));
    this.#control = new GuardedRemote<ResidentControlApi>(this.#route.endpoint('control'));
    // Held until the child attaches: only a task that never reached its child may be sent again.
    const held: HeldTask = (this.#held = { task: { data, cancelFlag, inputGate, run: this.#route.id, resident: true, ...(trees ? { trees: trees.trees, ahead: trees.ahead } : {}) } });
    const noticesIn = routeNotices(this.#route, this.#control, (notice) => {
      if (notice.type === 'events') onEvents(notice.events);
      else if (notice.type === 'attach') {
        this.#threadId = notice.threadId;
        held.task = undefined;
        attached();
        // The grace of a leave passed before any thread was known to run the stay: the leave,
        // sent again now, gets a grace of its own.
        if (this.#graceSpent) this.#armKill();
      }
      else if (notice.type === 'ready') built();
    });
    const task = runOnPool(pool, held);
    this.ended = task.then(
      async ({ result, failure, end, notices }): Promise<ThreadOutcome> => {
        this.#end(onTaskEnd);
        // The task's value may overtake the hub's notices (piscina answers on its own port); its
        // end notice, the child's last events, applies after them.
        await noticesIn(notices);
        if (end && end.events.length > 0) onEvents(end.events);
        this.#close();
        return { type: 'result', result, ...(failure ? { failure } : {}) };
      },
      (error: unknown): ThreadOutcome => {
        this.#end(onTaskEnd);
        // A thread that died had posted its last notices first, but its death may be reported first.
        pool.channels.drain();
        this.#close();
        return { type: 'thread-failed', error, diagnostic: describeThreadFailure(error, this.#killed, pool.options.cancelGraceMs), aborted: this.#killed };
      },
    );
    this.ready = Promise.race([
      ready,
      this.ended.then((outcome) => {
        // The typed error that kept the agent from being built there is the turn's, as in-process.
        if (outcome.type === 'result' && outcome.failure) throw new SubagentError(outcome.failure.code, outcome.failure.message);
        const why = outcome.type === 'result' ? (outcome.result.diagnostic ?? 'the child left its thread before it was built') : outcome.diagnostic;
        throw new SubagentError('START_FAILED', why, outcome.type === 'thread-failed' ? { cause: outcome.error } : undefined);
      }),
    ]);
    this.ready.catch(() => undefined);
  }

  /** Whether its channel is closed: the stay is over or its thread is gone, and `ended` is near. */
  get closed(): boolean {
    return this.#control.closed;
  }

  /** Whether the stay is over (its task ended). */
  get over(): boolean {
    return this.#over;
  }

  #end(onTaskEnd: () => void): void {
    this.#over = true;
    clearTimeout(this.#killTimer);
    this.#control.close('the child left its thread');
    onTaskEnd();
  }

  #close(): void {
    this.#route.dispose();
  }

  /**
   * Runs one turn; resolves at its end with its last events (those not sent as notices), rejects
   * `CLOSED` if the stay ends first.
   */
  prompt(messages: ResidentMessage[], hostTools: ResidentHostTools | undefined, steps: number): Promise<SessionEvent[]> {
    return this.#control.call((remote) => remote.prompt(messages, hostTools, steps));
  }

  /** Hands over messages of the next turn's first step ahead of its prompt (a closed stay's prompt says so). */
  stage(messages: ResidentMessage[]): void {
    this.#control.call((remote) => remote.stage(messages)).catch(() => undefined);
  }

  /**
   * Cancels the running turn: the flag lands at its next step or tool boundary, the call wakes a
   * child waiting on I/O, and a child that ignores both loses its thread after the grace, unless
   * `turnEnded` came first.
   */
  cancelTurn(cause: CancelCause): void {
    if (this.#over) return;
    Atomics.store(this.#cancelFlag, 0, 1);
    this.#control.call((remote) => remote.cancel(cause)).catch(() => undefined);
    this.#armKill();
  }

  /** The running turn ended: the grace of a cancel stops counting. */
  turnEnded(): void {
    clearTimeout(this.#killTimer);
    this.#killTimer = undefined;
  }

  /**
   * Closes the input the child adds to itself (see ResidentControlApi.closeOwnInput); resolves once
   * the child says what it added before has reached its host, its stay is over, or `boundMs` passed
   * (a thread in a synchronous loop answers only once its turn is cancelled, which comes after).
   */
  async closeOwnInput(boundMs: number): Promise<void> {
    if (this.#over) return;
    const closing = this.#attached.then(() => this.#control.call((remote) => remote.closeOwnInput()));
    await within(Promise.race([closing.catch(() => undefined), this.ended]), boundMs);
  }

  /** Ends the stay; resolves once its task has ended (the thread is terminated if it does not leave in time). */
  async leave(): Promise<void> {
    if (!this.#over) {
      void this.#attached.then(() => this.#control.call((remote) => remote.leave())).catch(() => undefined);
      this.#armKill();
    }
    await this.ended;
  }

  #armKill(): void {
    if (this.#killTimer) return;
    this.#killTimer = setTimeout(() => {
      const threadId = this.#threadId;
      if (threadId !== undefined) return this.#terminate(threadId);
      // No thread to end yet: the attach arms the grace again (a thread that has the stay and
      // runs nothing else, but never took it, is wedged: it is ended, and the stay sent elsewhere).
      this.#graceSpent = true;
      this.#killTimer = undefined;
      this.#pool.giveUp(this.#held, () => !this.#over && this.#threadId === undefined);
    }, this.#pool.options.cancelGraceMs);
  }

  #terminate(threadId: number): void {
    void this.#pool.terminateThread(threadId, () => {
      if (this.#over) return false;
      this.#killed = true;
      return true;
    });
  }
}

/** A decoded stay outcome's one-line account, for a turn that ended with its thread. */
export function stayFailure(outcome: ThreadOutcome): string {
  if (outcome.type === 'thread-failed') return outcome.diagnostic;
  return outcome.result.diagnostic ?? 'the child left its thread during the turn';
}
