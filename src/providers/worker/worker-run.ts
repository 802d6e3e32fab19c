// One spawn or fork child on the host side: it waits for a slot, posts the task, publishes the
// child's mirror once a thread has taken it, relays host tool calls and input, and settles its
// result only after every event of the child has been mirrored.
import { once, settled } from '../../seam/once.js';
import type { ChildTaskData, HostApi } from '../../seam/child-protocol.js';
import { encode } from '../../seam/codec.js';
import { SubagentError, isSubagentError } from '../../seam/errors.js';
import { finalAssistantOutput } from '../../seam/output.js';
import type { ContentBlock, MessageId, MessageSource } from '../../seam/content.js';
import type { CancelCause, InboxTarget, SessionEvent, TurnEndReason } from '../../seam/session-types.js';
import { DESCRIPTOR_EVENT } from '../../seam/descriptor.js';
import type { ResolvedSubagentStartRequest, SubagentResult, SubagentRun } from '../../seam/types.js';
import { usageOf } from '../../seam/usage.js';
import { startWaits } from '../../seam/start-wait.js';
import type { SessionLog } from '../../runtime/session.js';
import { executeForChild } from '../../runtime/tool-registry.js';
import { assertMessageFits, errorForThread, resultForThread } from './heap-fit.js';
import type { ProviderHost } from '../provider-host.js';
import type { Slot } from './admission.js';
import { WorkerChildAgent } from './child-agent.js';
import type { WorkerPoolEngine } from './pool.js';
import { ThreadChild, type ThreadOutcome } from './thread-child.js';
import { closeTurnOfDeadThread, recordUnrunTurn } from './thread-failure.js';

export interface WorkerProviderHost extends ProviderHost {
  readonly pool: WorkerPoolEngine;
}

/** A child's task, ready to post: its data, the host tools it may call, and its fork seed. */
export interface WorkerTaskPlan {
  data: ChildTaskData;
  allowedTools: ReadonlySet<string>;
  seed: readonly SessionEvent[];
}

/**
 * running: published (it takes input until the child closes its input gate) · settled: the result
 * is out. The start (a slot, then a thread) happens before the run exists, in `WorkerRun.start`.
 */
export type WorkerRunState = 'running' | 'settled';

/** The run's one abort listener and what it does now (see `WorkerRun.start`). */
interface AbortRelay {
  onAbort: () => void;
  readonly listener: () => void;
}

/** The child's host calls: their signal is made on the first call (most children make none or few). */
interface HostCalls {
  controller: AbortController | undefined;
  /** Calls not answered yet. */
  out: number;
  /** Set once the calls are stopped: the abort reason of every call after. */
  stopped: unknown;
  /** Called when no call is out any more (see {@link callsDone}). */
  idle: (() => void)[];
}

function callSignal(calls: HostCalls): AbortSignal {
  if (!calls.controller) {
    calls.controller = new AbortController();
    if (calls.stopped !== undefined) calls.controller.abort(calls.stopped);
  }
  return calls.controller.signal;
}

/** Aborts the calls out now; a later call starts aborted. With none out, nothing is dispatched. */
function stopCalls(calls: HostCalls, reason: unknown): void {
  if (calls.stopped !== undefined) return;
  calls.stopped = reason;
  if (calls.out > 0) calls.controller?.abort(reason);
  else calls.controller = undefined;
}

/**
 * Resolves once no call is out, or after `ms`: a child whose thread died waits for the calls it left
 * (a `subagent` call's child ending), so its result counts what they spent and ends after them.
 * Once `closing` is aborted (the host began to close) it waits no more than a turn of the event loop
 * (a call that stops as its signal aborts still ends first): a call may be waiting for the close.
 */
function callsDone(calls: HostCalls, ms: number, closing: AbortSignal): Promise<void> {
  if (calls.out === 0) return Promise.resolve();
  return new Promise((resolve) => {
    let timer = setTimeout(done, closing.aborted ? 0 : ms);
    const hurry = () => {
      clearTimeout(timer);
      timer = setTimeout(done, 0);
    };
    if (!closing.aborted) closing.addEventListener('abort', hurry, { once: true });
    function done() {
      clearTimeout(timer);
      closing.removeEventListener('abort', hurry);
      resolve();
    }
    calls.idle.push(done);
  });
}

/** How long a child's result waits for the answers to messages it took before it returned. */
const ANSWERS_GRACE_MS = 5000;

function cancelledStart(signal: AbortSignal): SubagentError {
  return SubagentError.cancelled('the start', signal.reason, 'before the child was published');
}

export class WorkerRun implements SubagentRun {
  readonly id: string;
  readonly result: Promise<SubagentResult>;
  readonly localAgent: WorkerChildAgent;
  readonly #host: WorkerProviderHost;
  readonly #child: ThreadChild;
  readonly #session: SessionLog;
  readonly #seedLength: number;
  #state: WorkerRunState = 'running';
  /** Input sent to the child and not yet acknowledged by it; a refusal is kept for the result. */
  readonly #deliveries = new Set<Promise<void>>();
  readonly #refused: unknown[] = [];
  readonly #cancel = () => this.cancel();
  /** The caller's signal, and the one of the child's host calls. */
  readonly #signal: AbortSignal;
  readonly #calls: HostCalls;
  /** What was delegated, for the log of a child that ended before it wrote it. */
  readonly #descriptor: ChildTaskData['descriptor'];

  /**
   * Waits for a slot, posts the task and resolves once a thread has taken it and the child's
   * session is published; rejects `CANCELLED` or `START_FAILED`, leaving nothing behind.
   */
  static async start(host: WorkerProviderHost, request: ResolvedSubagentStartRequest, plan: WorkerTaskPlan): Promise<WorkerRun> {
    const { signal } = request;
    const { header } = plan.data;
    // The process stays up until the child has settled (a start waiting for a slot included): its
    // notices arrive on unref'd ports.
    const releaseHold = host.pool.hold();
    // Waits for a slot before any channel exists: a start cancelled or refused here leaves nothing.
    let slot: Slot;
    try {
      slot = await host.pool.admission.acquire({
        child: header.id,
        parent: request.parent.id,
        parentOf: (id) => host.sessions.get(id)?.header.parentSession,
        signal,
        onWait: () => startWaits(signal, header.id),
      });
    } catch (error) {
      releaseHold();
      throw error;
    }
    // Set once published: the child's host calls act on it (none can come before). The closures
    // below live as long as the run, so they hold only these parts of the plan, not its data.
    const published: { run?: WorkerRun } = {};
    // The signal of the child's host calls: aborted when the run is cancelled (by its caller's
    // signal, run.cancel() or its agent's cancel) and when the child is gone, whatever ended it.
    const calls: HostCalls = { controller: undefined, out: 0, stopped: undefined, idle: [] };
    const { allowedTools, seed } = plan;
    let mirror: SessionLog | undefined;
    let onAttach: () => void = () => undefined;
    const hostApi: HostApi = {
      async callTool(name, input, callId) {
        const run = published.run;
        if (!allowedTools.has(name) || !run) throw new SubagentError('UNKNOWN_TOOL', `no tool named ${name} is available to this child`);
        // A call still in flight when the run was cancelled never starts: its result may have settled already.
        if (calls.stopped !== undefined) throw SubagentError.cancelled(`the ${name} call`, calls.stopped, 'before it reached the host');
        // While the call is out (a `subagent` call above all) the child only waits: its slot is lent to its children.
        const done = slot.wait();
        try {
          calls.out++;
          const result = await executeForChild(host.tools, name, input, { agent: run.localAgent, callId, signal: callSignal(calls) });
          return resultForThread(name, result, host.pool.options.resourceLimits?.maxOldGenerationSizeMb);
        } catch (error) {
          throw errorForThread(name, error, host.pool.options.resourceLimits?.maxOldGenerationSizeMb);
        } finally {
          calls.out--;
          done();
          if (calls.out === 0) for (const idle of calls.idle.splice(0)) idle();
        }
      },
    };
    // Events are mirrored write-behind: the child's own log is the truth, and this copy (which
    // persistence and listings read) catches up batch by batch; the result waits for the last batch.
    const sink = { attach: () => onAttach(), events: (events: SessionEvent[]) => mirror?.mirror(events) };
    // The slot is free again before `result` can settle, so a parent never resumes while its child still counts.
    // A tree spent while this start waited for its slot: the child must not make a model call first.
    const spent = request.budgetTree?.stop();
    // The child adds its spend to each covering tree and checks the tree in its thread: the host's
    // stop reaches a thread only when it next yields, which a child that never waits may not do.
    const trees = request.budgetTree?.share?.();
    const data = spent ? { ...plan.data, treeStop: spent } : plan.data;
    const child = new ThreadChild(host.pool, header.id, encode(data), hostApi, sink, () => slot.release(), trees?.length ? trees : undefined);
    // One abort listener for the child's whole life: it fails the start until the run exists, then
    // cancels the run (one listener per run fewer to add and remove).
    const relay: AbortRelay = { onAbort: () => undefined, listener: () => relay.onAbort() };
    signal.addEventListener('abort', relay.listener, { once: true });
    try {
      await new Promise<void>((resolve, reject) => {
        relay.onAbort = () => reject(cancelledStart(signal));
        // Runs synchronously on the attach notice, so the mirror exists before the first events.
        onAttach = () => {
          if (signal.aborted) return relay.onAbort();
          mirror = host.sessions.create(header, seed);
          resolve();
        };
        // Errors are built only when they are the outcome: most tasks end long after their attach.
        void child.outcome.then((outcome) => {
          if (mirror) return;
          if (outcome.type === 'result') reject(new SubagentError('START_FAILED', 'the worker finished the task before the child started'));
          // The pool closed before a thread took the child: as for a start still waiting for a slot.
          else if (isSubagentError(outcome.error, 'CLOSED')) reject(SubagentError.closedWhile('the worker pool', 'this start waited for a thread'));
          else reject(new SubagentError('START_FAILED', outcome.diagnostic, { cause: outcome.error }));
        });
      });
    } catch (error) {
      signal.removeEventListener('abort', relay.listener);
      child.abandon();
      releaseHold();
      throw error;
    }
    return (published.run = new WorkerRun(host, request, plan, child, mirror!, releaseHold, relay, calls));
  }

  private constructor(
    host: WorkerProviderHost,
    request: ResolvedSubagentStartRequest,
    plan: WorkerTaskPlan,
    child: ThreadChild,
    session: SessionLog,
    releaseHold: () => void,
    relay: AbortRelay,
    calls: HostCalls,
  ) {
    this.#host = host;
    this.#calls = calls;
    this.#signal = request.signal;
    this.#descriptor = plan.data.descriptor;
    this.#child = child;
    this.#session = session;
    this.#seedLength = plan.seed.length;
    this.id = plan.data.header.id;
    const { signal } = request;
    relay.onAbort = this.#cancel;
    // An abort between the attach and now found the start already resolved.
    if (signal.aborted) this.cancel();
    // A tree budget spans threads: the host accounts for the tree and tells the child when it is spent.
    const unwatch = request.budgetTree?.onStop((stop) => child.budgetStop(stop));
    this.result = child.outcome.then((outcome) => this.#settle(outcome)).finally(() => {
      this.#state = 'settled';
      this.#stopCalls();
      unwatch?.();
      signal.removeEventListener('abort', relay.listener);
      child.release();
      releaseHold();
    });
    this.localAgent = new WorkerChildAgent(session, plan.data.agentOptions, {
      deliver: (target, id, content, wake, source) => this.#deliver(target, id, content, wake, source),
      cancel: (cause) => this.#cancelWith(cause),
      settled: this.result,
      isOpen: () => this.#state === 'running' && child.takesInput,
    });
  }

  #deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): Promise<void> {
    // Thrown before anything crosses: input the running child's thread could not take would end the
    // child, or abort the whole process (see heap-fit.ts).
    assertMessageFits(content, this.#host.pool.options.resourceLimits?.maxOldGenerationSizeMb);
    const accepted = this.#child.deliver(target, id, content, wake, source);
    this.#deliveries.add(accepted);
    const forget = () => this.#deliveries.delete(accepted);
    accepted.then(forget, (error: unknown) => {
      forget();
      this.#refused.push(error);
    });
    return accepted;
  }

  async #settle(outcome: ThreadOutcome): Promise<SubagentResult> {
    // A child that returned took every message admitted to it first (it waits for them before it
    // returns): their answers may still be behind the task's value, so they are awaited. A dead
    // thread's are not coming: closing the channel rejects them.
    if (outcome.type !== 'result') {
      this.#child.release();
      // Its thread is gone: the calls it left out stop, and the result waits for them (bounded).
      this.#stopCalls();
      await callsDone(this.#calls, this.#host.abandonGraceMs, this.#host.agents.closing);
    } else if (this.#calls.out > 0) {
      // A cancelled child's turn ends without waiting for its host calls (see `hostTool`), which
      // were stopped with it: the result waits for them (bounded) as for a dead thread, so a
      // `subagent` call's child ends first, is counted, and a dispose leaves nothing running.
      this.#stopCalls();
      await callsDone(this.#calls, this.#host.abandonGraceMs, this.#host.agents.closing);
    }
    if (outcome.type === 'result' && this.#deliveries.size > 0) {
      // Bounded all the same: should an answer never come, the message counts as not delivered.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise((resolve) => (timer = setTimeout(resolve, ANSWERS_GRACE_MS)));
      await Promise.race([Promise.all([...this.#deliveries].map(settled)), late]);
      clearTimeout(timer);
    }
    this.#child.release();
    if (this.#deliveries.size > 0) await Promise.all([...this.#deliveries].map(settled));
    const result = outcome.type === 'result' ? outcome.result : this.#deadThreadResult(outcome);
    if (outcome.type === 'result' && result.stopReason !== 'completed') this.#closeUnrunTurn(result, outcome.failure);
    if (this.#refused.length === 0) return result;
    const note = `${this.#refused.length} message(s) sent to the child were not delivered`;
    return { ...result, diagnostic: result.diagnostic ? `${result.diagnostic}; ${note}` : note };
  }

  /**
   * A child that ended before its first turn (its tool modules did not load, it was cancelled at
   * once) wrote nothing: its log records that turn and how it ended, so no reader takes it for running.
   */
  #closeUnrunTurn(result: SubagentResult, failure: { code: string; message: string } | undefined): void {
    const error = failure ?? { code: 'NOT_STARTED', message: result.diagnostic ?? 'the child ended before its first turn' };
    const reason: TurnEndReason = result.stopReason === 'aborted' ? { kind: 'aborted', cause: this.#child.cause } : { kind: 'error', error };
    // As the child itself would have, inside its first turn: the log says what was delegated.
    recordUnrunTurn(this.#session, this.#seedLength, reason, () => this.#delegated());
  }

  /** What the child logs inside its first turn, recorded for it when it logged nothing: what was delegated. */
  #delegated(): { type: string; data: unknown }[] {
    return [{ type: DESCRIPTOR_EVENT, data: structuredClone(this.#descriptor) }];
  }

  #deadThreadResult({ diagnostic, aborted }: Extract<ThreadOutcome, { type: 'thread-failed' }>): SubagentResult {
    const session = this.#session;
    const own = () => session.events.slice(this.#seedLength);
    // A thread that died before the child's first events got here: the turn recorded for it says what was delegated.
    closeTurnOfDeadThread(session, this.#seedLength, aborted ? { kind: 'aborted', cause: this.#child.cause } : { kind: 'error', error: { code: 'THREAD_FAILED', message: diagnostic } }, this.#delegated());
    return { output: finalAssistantOutput(own()), diagnostic, stopReason: aborted ? 'aborted' : 'error', usage: usageOf(own()) };
  }

  cancel(): void {
    this.#cancelWith({ kind: 'parent' });
  }

  /** Cancels the child; its turn ends with `cause` (its main-side agent's cancel passes the caller's). */
  #cancelWith(cause: CancelCause): void {
    if (this.#state === 'settled') return;
    this.#stopCalls();
    this.#child.cancel(cause);
  }

  /** Host calls still out for the child stop: it was cancelled, or it is gone. */
  #stopCalls(): void {
    const signal = this.#signal;
    stopCalls(this.#calls, signal.aborted ? signal.reason : { kind: 'parent' });
  }

  readonly dispose = once(async () => {
    if (this.#state !== 'settled') this.cancel();
    await settled(this.result);
    await this.#host.sessions.remove(this.id);
  });
}
