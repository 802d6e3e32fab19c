// One queued child on the host: the mirror of its remote log (events re-sequenced after the host's
// own `queue/attempt` entries), its result, cancellation across machines, restarts of a child whose
// worker was lost, and dispose, which removes the child's job and keys from Redis. Tree budgets
// covering the child count its log as it arrives, and a spent one stops it on its worker.
import type { BudgetStop } from '../../seam/budget.js';
import { SubagentError, describeError, isSubagentError, type SubagentErrorCode } from '../../seam/errors.js';
import type { ContentBlock } from '../../seam/content.js';
import { DESCRIPTOR_EVENT, type SubagentDescriptorData } from '../../seam/descriptor.js';
import { once, settled } from '../../seam/once.js';
import { finalAssistantOutput } from '../../seam/output.js';
import type { SessionEvent, TurnEndReason } from '../../seam/session-types.js';
import type { BudgetTreeLink, SubagentResult, SubagentRun } from '../../seam/types.js';
import { usageOf } from '../../seam/usage.js';
import { treeCounter } from '../../runtime/child-run.js';
import type { SessionLog } from '../../runtime/session.js';
import type { LiveSessionStore } from '../../runtime/session-store.js';
import type { ConnectedRun, QueueConnection, ReplyRecord } from './connection.js';
import { JOB_NAME, MALFORMED_HINT, PROTOCOL_VERSION, SAME_VERSION_HINT, lockKey, ownProtocol, protocolText, replyProblem, type Placement, type QueueJobData, type ReplyEntry } from './protocol.js';
import { publishBudgetStop, publishCancel, removeChild, removeWhenFree } from './job-keys.js';

/** A log event the host appends when a worker thread takes the child (one per attempt). */
export const ATTEMPT_EVENT = 'queue/attempt';

export interface QueueRunInit {
  id: string;
  connection: QueueConnection;
  sessions: LiveSessionStore;
  data: QueueJobData;
  seedLength: number;
  descriptor: SubagentDescriptorData;
  /** The tree budgets covering the child: it counts into them as its log arrives, and they stop it. */
  budgetTree?: BudgetTreeLink | undefined;
}

function endReason(result: SubagentResult, code: SubagentErrorCode | 'QUEUE_CHILD_LOST'): TurnEndReason {
  if (result.stopReason === 'aborted') return { kind: 'aborted', cause: { kind: 'parent' } };
  return { kind: 'error', error: { code, message: result.diagnostic ?? 'the child was lost' } };
}

/** A child placed on the queue (`localAgent` is undefined: the agent runs on a worker). */
export class QueueRun implements SubagentRun, ConnectedRun {
  readonly id: string;
  readonly localAgent = undefined;
  readonly result: Promise<SubagentResult>;
  readonly #init: QueueRunInit;
  readonly #connection: QueueConnection;
  #session: SessionLog | undefined;
  readonly #pending: ReplyRecord[] = [];
  #attempt = 1;
  /** What turns a seq of this attempt's log into the host log's: set when a thread takes the attempt. */
  #attemptShift = 0;
  /** Events of this attempt left out of the host log so far (a repeated descriptor). */
  #skipped = 0;
  /**
   * Where the current attempt runs, until its first events come: the log records it just before
   * them, so another process never reads a child whose log begins without its descriptor.
   */
  #placement: Placement | undefined;
  #openTurn: number | undefined;
  #ownEvents = 0;
  #described = false;
  #strikes = 0;
  /** Set while a restart puts the child back on the queue: the watchdog leaves the job to it. */
  #restarting = false;
  #cancelled = false;
  /** A cancellation that could not reach Redis: each watchdog check sends it again until it does. */
  #cancelPending = false;
  /** Disposed while Redis did not answer: a watchdog check removes the job and keys once it does. */
  #removalPending = false;
  #settled = false;
  #resolve!: (result: SubagentResult) => void;
  #reject!: (error: SubagentError) => void;
  /** Adds the log's new spend to the covering trees and checks them (set once the log is published). */
  #countTrees: ((events: readonly SessionEvent[]) => void) | undefined;
  #unwatchTrees: (() => void) | undefined;

  constructor(init: QueueRunInit) {
    this.#init = init;
    this.id = init.id;
    this.#connection = init.connection;
    this.result = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    init.connection.register(this.id, this);
  }

  /** Publishes the child's session (entries that arrived before it are replayed). */
  publish(session: SessionLog): void {
    this.#session = session;
    // The service counts a run without a log on its thread only from its result: this run counts
    // its log into the trees itself, as it arrives, and passes a spent tree's stop to its worker.
    const link = this.#init.budgetTree;
    const trees = link?.share?.();
    if (link && trees) {
      const count = treeCounter(trees, this.#init.seedLength);
      this.#countTrees = (events) => {
        count(events);
        link.stop();
      };
      this.#unwatchTrees = link.onStop((stop) => this.#budgetStop(stop));
    }
    for (const entry of this.#pending.splice(0)) this.receive(entry);
  }

  receive(record: ReplyRecord): void {
    if (this.#settled) return;
    const session = this.#session;
    if (!session) return void this.#pending.push(record);
    // Checked before anything else is read of it: an entry of another version may be shaped otherwise.
    if (!ownProtocol(record)) return this.#refuse(record);
    const problem = replyProblem(record);
    if (problem !== undefined) return this.#malformed(problem);
    const entry = record as unknown as ReplyEntry;
    const attempt = entry.kind === 'attach' ? entry.placement.attempt : entry.attempt;
    if (attempt !== this.#attempt) return; // a lost attempt's worker may still be talking
    if (entry.kind === 'attach') {
      this.#placement = { hostname: entry.placement.hostname, pid: entry.placement.pid, threadId: entry.placement.threadId, attempt };
    } else if (entry.kind === 'events') {
      this.#placeAttempt(session);
      try {
        session.mirror(this.#own(entry.events));
        this.#countTrees?.(session.events);
      } catch (error) {
        if (!isSubagentError(error, 'SEQ_MISMATCH')) return this.#malformed(`its events could not be read (${describeError(error)})`);
        // Events missing from the stream (their worker could not write them: a Redis out of memory, say):
        // the log cannot be completed, so the child is stopped where it runs rather than keep its slot.
        const why = `some of the child's events never reached the host (${describeError(error)}): its worker could not write them to Redis (out of memory, or refusing writes? see the worker's log)`;
        this.#lose(`${why}; the child was stopped`, false);
      }
    } else {
      this.#settle(entry.result);
    }
  }

  /**
   * A reply to this child that no worker of this version writes (an unknown kind, a field missing or of
   * another type; event data the host cannot read): nothing else the stream says of it can be trusted.
   * The run fails `CORRUPT_DATA` (so ends its log's turn), the logger is told, and its worker stops it.
   */
  #corrupt(what: string, cause?: unknown): SubagentError {
    const message = `child ${this.id} failed: ${what}, so the child was stopped; ${MALFORMED_HINT}`;
    this.#connection.warn(`queue provider ${this.#connection.options.name}: ${message}`);
    if (!this.#connection.closed) this.#publishCancel().catch(() => this.#retryCancel());
    return new SubagentError('CORRUPT_DATA', message, cause === undefined ? undefined : { cause });
  }

  #malformed(problem: string): void {
    if (this.#cancelled) return this.#settle({ output: [], stopReason: 'aborted' });
    const error = this.#corrupt(`a reply to it on the queue's reply stream is malformed (${problem})`);
    this.#settle({ output: [], stopReason: 'error', diagnostic: error.message }, error);
  }

  /**
   * A worker of another protocol version took the child: its replies would be misread, and it may
   * not honour what the job asks (an output schema, say). The run fails with the reason for good (a
   * restart could land on such a worker again), and a worker still running the child stops it.
   */
  #refuse(entry: ReplyRecord): void {
    if (this.#cancelled) return this.#settle({ output: [], stopReason: 'aborted' });
    // A worker that refuses the job (as every versioned worker does) ends it without running it.
    const ended = entry.kind === 'end';
    const message = `child ${this.id} was taken by a queue worker speaking queue protocol ${protocolText(entry)}, and this host speaks ${PROTOCOL_VERSION}, so ${ended ? 'it did not run' : 'it is stopped there'}; ${SAME_VERSION_HINT}`;
    this.#settle({ output: [], stopReason: 'error', diagnostic: message }, new SubagentError('UNSUPPORTED_CAPABILITY', message));
    if (!ended && !this.#connection.closed) this.#publishCancel().catch(() => this.#retryCancel());
  }

  /** Records where the current attempt runs (once), and numbers its events after that record. */
  #placeAttempt(session: SessionLog): void {
    const placement = this.#placement;
    if (placement === undefined) return;
    this.#placement = undefined;
    session.append(ATTEMPT_EVENT, placement);
    const firstChildSeq = this.#init.seedLength > 0 ? this.#init.seedLength + 1 : 0;
    this.#attemptShift = session.seq - firstChildSeq;
    this.#skipped = 0;
  }

  /**
   * The events of this attempt as the host's log numbers them. A restarted attempt repeats the
   * child's descriptor; the log keeps the first, so its usage counts what every attempt spent.
   */
  #own(events: readonly SessionEvent[]): SessionEvent[] {
    const kept: SessionEvent[] = [];
    for (const event of events) {
      if (event.type === DESCRIPTOR_EVENT) {
        if (this.#described) {
          this.#skipped += 1;
          continue;
        }
        this.#described = true;
      }
      kept.push(this.#track({ ...event, seq: event.seq + this.#attemptShift - this.#skipped }));
    }
    return kept;
  }

  #track(event: SessionEvent): SessionEvent {
    this.#ownEvents += 1;
    if (event.type === 'turn/start') this.#openTurn = (event.data as { turn: number }).turn;
    else if (event.type === 'turn/end') this.#openTurn = undefined;
    return event;
  }

  async check(connection: QueueConnection): Promise<void> {
    if (this.#cancelPending) {
      // Only a settled run waits to send its cancel: once sent, it leaves the watchdog's list.
      await this.#publishCancel();
      this.#cancelPending = false;
      // A job no worker has taken yet goes; one taken later finds the cancel key.
      await connection.queue.remove(this.id).catch(() => undefined);
      if (!this.#removalPending) connection.unregister(this.id);
    }
    if (this.#removalPending) {
      this.#removalPending = false;
      // Not awaited: a worker may hold the job a while, and the other runs' checks go on meanwhile.
      void removeChild(connection, this.id).then(() => connection.unregister(this.id), () => this.#removeLater());
    }
    if (this.#settled || this.#restarting) return;
    const state = await connection.queue.getJobState(this.id);
    if (this.#settled || this.#restarting) return;
    if (state === 'active') {
      const locked = (await connection.client.exists(lockKey(connection.options.queue, this.id))) === 1;
      this.#strike(!locked, 'the worker running the child stopped renewing its job lock (lost worker)');
    } else if (state === 'failed') {
      const job = await connection.queue.getJob(this.id);
      this.#lose(`the queue failed the child: ${job?.failedReason ?? 'no reason given'}`, true);
    } else {
      // A finished job's last reply may still be on its way; only a second look is conclusive.
      this.#strike(state === 'unknown' || state === 'completed', 'the child’s job left the queue without a result');
    }
  }

  #strike(bad: boolean, diagnostic: string): void {
    this.#strikes = bad ? this.#strikes + 1 : 0;
    if (this.#strikes >= 2) this.#lose(diagnostic, true);
  }

  /**
   * Redis has been silent for the lock duration: the run settles `error`. It is no lost worker's,
   * so no attempt is spent on it: a restart could not be queued, and the worker may still run it.
   */
  lost(diagnostic: string): void {
    this.#lose(diagnostic, false);
  }

  #lose(diagnostic: string, restart: boolean): void {
    if (this.#settled) return;
    if (this.#cancelled) return this.#settle({ output: [], stopReason: 'aborted' });
    if (restart && this.#attempt < this.#connection.options.attempts && !this.#connection.closed) return void this.#restart(diagnostic);
    this.#settle({ output: [], stopReason: 'error', diagnostic });
    // A worker may still run the child (a lost Redis came back, a worker stalled): it is told to stop.
    if (!this.#connection.closed) this.#publishCancel().catch(() => this.#retryCancel());
  }

  /** Puts the child back on the queue as a new attempt; its log closes the lost attempt's turn. */
  async #restart(diagnostic: string): Promise<void> {
    this.#strikes = 0;
    this.#attempt += 1;
    this.#restarting = true;
    this.#closeTurn({ output: [], stopReason: 'error', diagnostic }, 'QUEUE_CHILD_LOST');
    const { queue } = this.#connection;
    try {
      // A job a worker took meanwhile (the queue's own stall check put it back) is let go of first:
      // adding a job under an id still in use adds nothing.
      if (!(await removeWhenFree(this.#connection, this.id)) && !this.#settled) throw new Error('a queue worker still holds its job');
      // A run settled meanwhile (Redis went silent, a cancel) queues nothing for nobody to wait for.
      if (this.#settled) return;
      await this.#connection.ensureReply();
      if (this.#settled) return;
      await queue.add(JOB_NAME, { ...this.#init.data, attempt: this.#attempt }, { jobId: this.id, removeOnComplete: true });
    } catch (error) {
      this.#settle({ output: [], stopReason: 'error', diagnostic: `${diagnostic}; restarting it failed (${String(error)})` });
    } finally {
      this.#restarting = false;
    }
  }

  #closeTurn(result: SubagentResult, code: SubagentErrorCode | 'QUEUE_CHILD_LOST'): void {
    const session = this.#session;
    if (!session) return;
    // An attempt that was placed but sent nothing is still on record.
    this.#placeAttempt(session);
    if (this.#ownEvents === 0) {
      // The child never ran: the log still records the delegation and how it ended.
      session.append('turn/start', { turn: 1 });
      session.append(DESCRIPTOR_EVENT, structuredClone(this.#init.descriptor));
      this.#described = true;
      this.#openTurn = 1;
      this.#ownEvents = 2;
    }
    if (this.#openTurn !== undefined) session.append('turn/end', { turn: this.#openTurn, reason: endReason(result, code) });
    this.#openTurn = undefined;
  }

  /** Resolves the result, or rejects it with `error` (the log's turn still ends, with its code). */
  #settle(result: SubagentResult, error?: SubagentError): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#connection.unregister(this.id);
    let output: ContentBlock[] = result.output;
    if (!error && output.length === 0 && result.stopReason !== 'completed' && this.#session) {
      try {
        output = finalAssistantOutput(this.#session.events.slice(this.#init.seedLength));
      } catch (cause) {
        error = this.#corrupt(`its log from the queue's reply stream could not be read as it settled (${describeError(cause)})`, cause);
        result = { output: [], stopReason: 'error', diagnostic: error.message };
      }
    }
    this.#closeTurn(result, error?.code ?? 'QUEUE_CHILD_LOST');
    this.#unwatchTrees?.();
    if (this.#session) this.#countTrees?.(this.#session.events);
    if (error) return this.#reject(error);
    const own = this.#session?.events.slice(this.#init.seedLength);
    // Usage is the host's log's: every attempt as far as its events arrived (a worker reports its own attempt).
    this.#resolve({ ...result, output, ...(own ? { usage: usageOf(own) } : {}) });
  }

  /** Tells the workers to stop the child; one no worker has taken yet is removed at once (BullMQ's remove answers 1 for a job gone too, whose end may be unread). */
  cancel(): void {
    if (this.#cancelled || this.#settled) return;
    this.#cancelled = true;
    const { queue } = this.#connection;
    void (async () => {
      await this.#publishCancel();
      if (['waiting', 'prioritized', 'delayed', 'waiting-children'].includes(await queue.getJobState(this.id)) && (await queue.remove(this.id)) === 1) this.#settle({ output: [], stopReason: 'aborted' });
    })().catch(() => {
      this.#settle({ output: [], stopReason: 'aborted', diagnostic: 'the cancellation could not reach Redis' });
      this.#retryCancel();
    });
  }

  /**
   * The start was given up on after its job was sent (Redis silent, a command timed out, the
   * connection dropped), so the job may still reach the queue: nobody would wait for it. The
   * cancel key goes right behind it on the same connection, so a worker that takes it ends it
   * without running it, and the job is removed; sent again by the watchdog until Redis takes them.
   */
  withdraw(): void {
    this.#cancelled = true;
    this.#settle({ output: [], stopReason: 'aborted' });
    Promise.all([this.#publishCancel(), this.#connection.queue.remove(this.id)]).catch(() => this.#retryCancel());
  }

  /**
   * Keeps a settled run on the watchdog's list until its cancellation reached Redis: a worker may
   * still run the child, and learns of the cancel only from Redis. Not after the host closed.
   */
  #retryCancel(): void {
    if (this.#connection.closed) return;
    this.#cancelPending = true;
    this.#connection.register(this.id, this);
  }

  /** The job and keys of this disposed run are removed by a watchdog check, once Redis answers (a host closed first leaves them). */
  #removeLater(): void {
    if (this.#connection.closed) return;
    this.#removalPending = true;
    this.#connection.register(this.id, this);
  }

  #publishCancel(): Promise<void> {
    return publishCancel(this.#connection, this.id);
  }

  /**
   * A covering tree is spent: the worker running the child passes the stop to it, which ends it at
   * its next step boundary as a worker child's. Best effort: a Redis that cannot be reached loses it.
   */
  #budgetStop(stop: BudgetStop): void {
    if (!this.#settled) publishBudgetStop(this.#connection, this.id, stop).catch(() => undefined);
  }

  /** Idempotent: cancels, waits for the result, removes the job and keys, drops the session. */
  readonly dispose = once(async () => {
    this.cancel();
    await settled(this.result);
    // A cancellation still on its way keeps the run registered: its check sends it and removes the job.
    if (!this.#cancelPending) this.#connection.unregister(this.id);
    if (this.#cancelPending) this.#removalPending = true;
    else if (!this.#connection.closed) {
      // Nobody waits for a silent Redis: the watchdog removes them once it answers again.
      await this.#connection.answering(() => removeChild(this.#connection, this.id)).catch(() => this.#removeLater());
    }
    await this.#init.sessions.remove(this.id);
  });

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}
