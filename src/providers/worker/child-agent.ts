// The main-thread face of a worker child: an Agent whose session mirrors the child's log (events
// arrive in batches) and whose input and cancel act on the real child across the port.
import { randomUUID } from 'node:crypto';
import type { Agent, AgentOptions } from '../../seam/agent-types.js';
import type { ContentBlock, MessageId, MessageSource } from '../../seam/content.js';
import { SubagentError } from '../../seam/errors.js';
import { settled } from '../../seam/once.js';
import type { CancelCause, InboxTarget, SessionEvent } from '../../seam/session-types.js';
import type { SessionLog } from '../../runtime/session.js';

export interface ChildAgentLink {
  deliver(target: InboxTarget, id: MessageId, content: ContentBlock[], wake: boolean): void;
  cancel(cause: CancelCause): void;
  /** Settles when the child's task has ended. */
  readonly settled: Promise<unknown>;
  readonly open: boolean;
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

  #send(target: InboxTarget, content: ContentBlock[], wake: boolean): MessageId {
    if (!this.#link.open) throw new SubagentError('CLOSED', `child ${this.id} has finished; its worker no longer takes input`);
    if (!Array.isArray(content) || content.length === 0) {
      throw new SubagentError('INVALID_REQUEST', 'message content must be a non-empty array of content blocks');
    }
    const id = randomUUID();
    this.#link.deliver(target, id, structuredClone(content), wake);
    return id;
  }

  followup(content: ContentBlock[], _opts?: { source?: MessageSource }): MessageId {
    return this.#send('next-turn', content, true);
  }

  steer(content: ContentBlock[], _opts?: { source?: MessageSource }): MessageId {
    return this.#send('next-step', content, true);
  }

  inject(content: ContentBlock[], _opts?: { source?: MessageSource }): MessageId {
    return this.#send('next-step', content, false);
  }

  cancel(cause: CancelCause = { kind: 'user' }): void {
    this.#link.cancel(cause);
  }

  async whenIdle(): Promise<void> {
    await settled(this.#link.settled);
  }

  subscribe(listener: (event: SessionEvent) => void): () => void {
    return this.session.subscribe(listener);
  }
}
