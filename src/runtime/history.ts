// Model history derived from a session log: user messages, non-empty assistant messages and tool
// results. Kept incrementally so each step reads only the events appended since the last one.
import type { ContentBlock } from '../seam/content.js';
import type { SessionEvent, SessionEventMap } from '../seam/session-types.js';
import type { ModelMessage } from './models/types.js';

export class History {
  readonly #messages: ModelMessage[] = [];
  #upTo = 0;

  /**
   * The messages of `events` (which must extend the events seen before). Each is a new object over
   * frozen content (the log's, or frozen here): an adapter that rewrites a request's messages in
   * place changes that request only, never what later steps are sent.
   */
  derive(events: readonly SessionEvent[]): ModelMessage[] {
    for (; this.#upTo < events.length; this.#upTo++) this.#push(events[this.#upTo]!);
    return this.#messages.map(({ role, content }) => ({ role, content }));
  }

  #push(event: SessionEvent): void {
    switch (event.type) {
      case 'user/message': {
        const data = event.data as SessionEventMap['user/message'];
        this.#messages.push({ role: 'user', content: data.content });
        return;
      }
      case 'assistant/message': {
        const data = event.data as SessionEventMap['assistant/message'];
        if (data.content.length > 0) this.#messages.push({ role: 'assistant', content: data.content });
        return;
      }
      case 'tool/result': {
        const data = event.data as SessionEventMap['tool/result'];
        const block: ContentBlock = Object.freeze({ type: 'tool_result' as const, callId: data.callId, content: data.content, ...(data.isError ? { isError: true } : {}) });
        const last = this.#messages.at(-1);
        // Consecutive results of one step travel together in one user message.
        if (last?.role === 'user' && last.content.every((b) => b.type === 'tool_result')) {
          this.#messages[this.#messages.length - 1] = { role: 'user', content: Object.freeze([...last.content, block]) as ContentBlock[] };
        } else {
          this.#messages.push({ role: 'user', content: Object.freeze([block]) as ContentBlock[] });
        }
        return;
      }
      default:
        return; // other event types are not model history
    }
  }
}
