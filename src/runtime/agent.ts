// The agent: a session, a two-list inbox and a driver that runs turns while input is pending.
// Input is logged (`inbox/accepted`) before it is queued, so a restored session replays it.
import type { Agent, AgentOptions } from '../seam/agent-types.js';
import { flaggedCause } from '../seam/cancel-flag.js';
import { copyMessageContent, copyMessageSource, newId, sourceOption, type ContentBlock, type MessageId, type MessageSource } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import type { CancelCause, InboxTarget, SessionEvent } from '../seam/session-types.js';
import { History } from './history.js';
import { Inbox } from './inbox.js';
import type { ModelAdapter } from './models/types.js';
import { lastTurnOf, pendingInbox, type SessionLog } from './session.js';
import type { ToolRegistry } from './tool-registry.js';
import type { AgentHooks, TurnContext } from './turn-context.js';
import { runTurn } from './turn.js';

export interface AgentInit {
  session: SessionLog;
  options: AgentOptions;
  model: ModelAdapter;
  tools: ToolRegistry;
  hooks?: AgentHooks;
  /** Called with failures the driver could not attribute to a turn. */
  onError?: (error: unknown) => void;
  /**
   * A shared cancel flag (index 0 set to non-zero by another thread). Tools see it through
   * `ctx.signal.aborted` even while they run synchronous code.
   */
  cancelFlag?: Int32Array;
  /**
   * Where input the agent's own code adds (`followup`, `steer`, `inject`) goes instead of this
   * inbox: the inbox is kept elsewhere (a resident worker child's, by its host-side agent), which
   * logs and runs it. Input delivered here (`deliver`) still comes in.
   */
  ownInput?: OwnInput;
  /** See `TurnContext.abandonGraceMs`: for agents whose model and tools run on this thread. */
  abandonGraceMs?: number;
  /** See `TurnContext.closing`. */
  closing?: AbortSignal;
}

/** Takes input an agent added to itself, under the id it returned. */
export type OwnInput = (target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource) => void;

/** The runtime's Agent implementation. */
export class LocalAgent implements Agent {
  readonly options: AgentOptions;
  readonly #session: SessionLog;
  readonly #inbox = new Inbox();
  readonly #turn: TurnContext;
  readonly #onError: ((error: unknown) => void) | undefined;
  readonly #ownInput: OwnInput | undefined;
  #status: 'idle' | 'running' = 'idle';
  #activity: Promise<void> = Promise.resolve();
  #controller: AbortController | undefined;
  /** Set by a cancel that keeps the inbox: queued input waits for the next waking delivery. */
  #parked = false;
  #lastTurn: number;
  /** Set when the owner released the agent: its session left the store, so input would vanish. */
  #released = false;
  /** Set by `beginDispose()`: input is still logged (nothing lost), but no turn starts any more. */
  #disposing = false;
  /** Some input restored from the log was waking (a `followup` or `steer`, not only `inject`s). */
  #restoredWaking = false;

  constructor(init: AgentInit) {
    this.options = Object.freeze({ ...init.options });
    this.#session = init.session;
    this.#onError = init.onError;
    this.#ownInput = init.ownInput;
    this.#lastTurn = lastTurnOf(init.session.events);
    this.#turn = {
      agent: this,
      session: init.session,
      inbox: this.#inbox,
      history: new History(),
      model: init.model,
      tools: init.tools,
      options: this.options,
      hooks: init.hooks ?? {},
      newId,
      ...(init.cancelFlag ? { cancelFlag: init.cancelFlag } : {}),
      ...(init.abandonGraceMs === undefined ? {} : { abandonGraceMs: init.abandonGraceMs }),
      ...(init.closing ? { closing: init.closing } : {}),
    };
    for (const { target, message, wake } of pendingInbox(init.session.events)) {
      this.#inbox.add(target, message);
      if (wake) this.#restoredWaking = true;
    }
  }

  get id(): string {
    return this.#session.id;
  }

  get session(): SessionLog {
    return this.#session;
  }

  get status(): 'idle' | 'running' {
    return this.#status;
  }

  /** The tools this agent sees. */
  get tools(): ToolRegistry {
    return this.#turn.tools;
  }

  /** Number of queued, unclaimed messages. */
  get pendingInput(): number {
    return this.#inbox.size;
  }

  /** Number of queued messages that each start a later turn. */
  get pendingTurns(): number {
    return this.#inbox.nextTurn.length;
  }

  followup(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#own('next-turn', content, sourceOption(opts), true);
  }

  /** Accepts input under a given id (transports that already returned the id to their caller). */
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source?: MessageSource): MessageId {
    return this.#accept(target, content, source, wake, id);
  }

  steer(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#own('next-step', content, sourceOption(opts), true);
  }

  inject(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#own('next-step', content, sourceOption(opts), false);
  }

  /** Input the agent's own code adds: to this inbox, or to the one kept elsewhere (`ownInput`). */
  #own(target: InboxTarget, content: ContentBlock[], source: MessageSource | undefined, wake: boolean): MessageId {
    if (!this.#ownInput) return this.#accept(target, content, source, wake);
    if (this.#released) throw SubagentError.closed(`agent ${this.id}`, 'it was disposed and takes no more input');
    const copy = copyMessageContent(content);
    const id = newId();
    this.#ownInput(target, id, copy, wake, source === undefined ? { kind: 'user' } : copyMessageSource(source));
    return id;
  }

  /**
   * Forgets queued input here without discarding it in the log: it stays pending there, and an
   * agent loaded from that log later takes it up (an evicted continuable child keeps its quiet reports).
   */
  shelveInbox(): void {
    this.#inbox.clear();
  }

  /**
   * Cancels for disposal: the current turn ends aborted and no later input wakes the agent (input
   * accepted meanwhile stays pending in the log, for an agent resumed from it). The registry calls it,
   * then waits for idle, then `release()`.
   */
  beginDispose(): void {
    this.holdTurns();
    this.cancel({ kind: 'disposed' });
  }

  /**
   * No later input wakes the agent (it is logged, and stays pending there): its owner is tearing it
   * down, and a turn started now would only be aborted by that teardown, its input claimed by it.
   */
  holdTurns(): void {
    this.#disposing = true;
  }

  /** Refuses all later input with `CLOSED`; the registry calls it when it disposes the agent. */
  release(): void {
    this.#released = true;
  }

  #accept(target: InboxTarget, content: ContentBlock[], source: MessageSource | undefined, wake: boolean, id: MessageId = newId()): MessageId {
    if (this.#released) throw SubagentError.closed(`agent ${this.id}`, 'it was disposed and takes no more input');
    const copy = copyMessageContent(content);
    const from = source === undefined ? { kind: 'user' as const } : copyMessageSource(source);
    const message = { id, content: copy, source: from };
    // Queued before it is logged (the append freezes it): a listener of its `inbox/accepted` that
    // cancels discards it too, and input that listener sends queues after it, as the log has it.
    this.#inbox.add(target, message);
    this.#session.append('inbox/accepted', { id, target, content: message.content, source: message.source, ...(wake ? {} : { wake: false as const }) });
    if (wake) this.wake();
    return id;
  }

  /** The next turn makes at most `steps` model calls (fewer than maxStepsPerTurn; see TurnContext.stepAllowance). */
  allowSteps(steps: number): void {
    this.#turn.stepAllowance = steps;
  }

  /**
   * Starts the driver for input restored from the log, unless all of it was context only (`inject`:
   * a quiet report is for the next turn, and starts none after a restart either).
   */
  wakeRestored(): void {
    if (this.#restoredWaking) this.wake();
  }

  /** Starts the driver if input is pending (used after restoring a session with queued input). */
  wake(): void {
    if (this.#disposing) return;
    this.#parked = false;
    if (this.#status === 'running' || this.#inbox.size === 0) return;
    this.#status = 'running';
    this.#activity = Promise.resolve().then(() => this.#drive());
  }

  async #drive(): Promise<void> {
    try {
      while (!this.#parked && this.#inbox.size > 0) {
        // A set cancel flag is a cancellation whose message may not have arrived yet. A turn the
        // flag aborts before it claims input leaves that input queued; without this check the
        // loop would start turn after turn in microtasks alone, and the message never gets in.
        const flagged = flaggedCause(this.#turn.cancelFlag);
        if (flagged) {
          this.cancel(flagged);
          break;
        }
        this.#controller = new AbortController();
        await runTurn(this.#turn, ++this.#lastTurn, this.#controller);
      }
    } catch (error) {
      this.#onError?.(error);
    } finally {
      this.#controller = undefined;
      this.#status = 'idle';
    }
  }

  cancel(cause: CancelCause = { kind: 'user' }, opts?: { keepInbox?: boolean }): void {
    if (!opts?.keepInbox) {
      const ids = this.#inbox.clear();
      if (ids.length > 0) this.#session.append('inbox/discarded', { ids });
    }
    // A driver that is scheduled but has not started its turn yet stops before it starts one.
    if (this.#status === 'running') this.#parked = true;
    const controller = this.#controller;
    if (controller && !controller.signal.aborted) controller.abort(cause);
  }

  async whenIdle(): Promise<void> {
    while (this.#status === 'running') await this.#activity;
  }

  subscribe(listener: (event: SessionEvent) => void): () => void {
    return this.#session.subscribe(listener);
  }
}
