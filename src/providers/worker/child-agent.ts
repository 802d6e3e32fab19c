// The main-thread face of a worker child: an Agent whose session mirrors the child's log (events
// arrive in batches) and whose input and cancel act on the real child across the port.
import type { Agent, AgentOptions } from '../../seam/agent-types.js';
import { copyMessageContent, copyMessageSource, newId, sourceOption, type ContentBlock, type MessageId, type MessageSource } from '../../seam/content.js';
import { cancelCauseOf } from '../../seam/cancel-flag.js';
import { SubagentError } from '../../seam/errors.js';
import { settled } from '../../seam/once.js';
import type { CancelCause, InboxTarget, SessionEvent } from '../../seam/session-types.js';
import type { SessionLog } from '../../runtime/session.js';

export interface ChildAgentLink {
  /**
   * Sends input under `id`; resolves once the child's log holds it, rejects `CLOSED` if the child
   * cannot take it (its run then reports the loss in its result).
   */
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): Promise<void>;
  cancel(cause: CancelCause): void;
  /** Settles when the child's task has ended. */
  readonly settled: Promise<unknown>;
  /** False once the child takes no more input. */
  isOpen(): boolean;
}

export class WorkerChildAgent implements Agent {
  readonly session: SessionLog;
  readonly options: AgentOptions;
  readonly #link: ChildAgentLink;
  #status: 'idle' | 'running' = 'running';

  constructor(session: SessionLog, options: AgentOptions, link: ChildAgentLink) {
    this.session = session;
    this.options = Object.freeze({ ...options });
    this.#link = link;
    void link.settled.finally(() => {
      this.#status = 'idle';
    });
  }

  get id(): string {
    return this.session.id;
  }

  get status(): 'idle' | 'running' {
    return this.#status;
  }

  /**
   * Sends input to the child and resolves with its id once the child's log holds it; rejects
   * `CLOSED` when the child has finished or cannot take it. `followup`, `steer` and `inject` send
   * the same way but return the id at once (the Agent contract is synchronous).
   */
  send(target: InboxTarget, content: ContentBlock[], opts: { wake: boolean; source?: MessageSource }): Promise<MessageId> {
    try {
      const { id, accepted } = this.#send(target, content, opts.wake, opts.source);
      return accepted.then(() => id);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #send(target: InboxTarget, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): { id: MessageId; accepted: Promise<void> } {
    if (!this.#link.isOpen()) throw new SubagentError('CLOSED', `child ${this.id} has finished; its worker no longer takes input`);
    // Checked here, not by the child: data a port cannot carry would never reach it, and the child
    // would wait for that message forever.
    const copy = copyMessageContent(content);
    const from = source === undefined ? undefined : copyMessageSource(source);
    const id = newId();
    const accepted = this.#link.deliver(target, id, copy, wake, from);
    return { id, accepted };
  }

  #sendNow(target: InboxTarget, content: ContentBlock[], wake: boolean, source: MessageSource | undefined): MessageId {
    const { id, accepted } = this.#send(target, content, wake, source);
    // Not dropped: the run waits for this acknowledgement before its result, and a refusal is
    // reported there (the child only refuses once it has ended).
    accepted.catch(() => undefined);
    return id;
  }

  followup(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#sendNow('next-turn', content, true, sourceOption(opts));
  }

  steer(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#sendNow('next-step', content, true, sourceOption(opts));
  }

  inject(content: ContentBlock[], opts?: { source?: MessageSource }): MessageId {
    return this.#sendNow('next-step', content, false, sourceOption(opts));
  }

  cancel(cause: CancelCause = { kind: 'user' }): void {
    // As the child's own turn would log it: what else the caller passed could not cross to its thread.
    this.#link.cancel(cancelCauseOf(cause));
  }

  async whenIdle(): Promise<void> {
    await settled(this.#link.settled);
  }

  subscribe(listener: (event: SessionEvent) => void): () => void {
    return this.session.subscribe(listener);
  }
}
