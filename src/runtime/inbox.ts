// The agent's inbox: two FIFO lists. `next-turn` items start later turns (one per turn);
// `next-step` items enter the running turn's next step.
import type { ContentBlock, MessageId, MessageSource } from '../seam/content.js';
import type { InboxTarget } from '../seam/session-types.js';

export interface InboxMessage {
  id: MessageId;
  content: ContentBlock[];
  source: MessageSource;
}

export class Inbox {
  readonly nextTurn: InboxMessage[] = [];
  readonly nextStep: InboxMessage[] = [];

  add(target: InboxTarget, message: InboxMessage): void {
    (target === 'next-turn' ? this.nextTurn : this.nextStep).push(message);
  }

  get size(): number {
    return this.nextTurn.length + this.nextStep.length;
  }

  /** Takes all of `next-step`, plus the first `next-turn` item when `first` (a turn's first step). */
  claim(first: boolean): InboxMessage[] {
    const batch: InboxMessage[] = [];
    if (first) {
      const head = this.nextTurn.shift();
      if (head) batch.push(head);
    }
    batch.push(...this.nextStep.splice(0));
    return batch;
  }

  /** Empties both lists; returns the ids removed. */
  clear(): MessageId[] {
    const ids = [...this.nextTurn, ...this.nextStep].map((message) => message.id);
    this.nextTurn.length = 0;
    this.nextStep.length = 0;
    return ids;
  }
}
