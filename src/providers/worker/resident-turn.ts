// One turn of a resident worker child as its host-side agent sees it: the child's events (several
// steps, its own tool calls) become one model answer. Text of the last step is the answer; earlier
// steps' text, tool calls and their results become reasoning, so the host-side log shows the work.
import type { ContentBlock } from '../../seam/content.js';
import { textOf } from '../../seam/content.js';
import type { ModelChunk } from '../../seam/model-types.js';
import type { SessionEvent, SessionEventMap, TurnEndReason, Usage } from '../../seam/session-types.js';

const NOTE_LIMIT = 400;

function note(text: string): string {
  return text.length > NOTE_LIMIT ? `${text.slice(0, NOTE_LIMIT)}…` : text;
}

function sum(a: Usage | undefined, b: Usage): Usage {
  if (!a) return { ...b };
  const total: Usage = { inputTokens: a.inputTokens + b.inputTokens, outputTokens: a.outputTokens + b.outputTokens };
  if (a.cacheReadTokens !== undefined || b.cacheReadTokens !== undefined) total.cacheReadTokens = (a.cacheReadTokens ?? 0) + (b.cacheReadTokens ?? 0);
  if (a.reasoningTokens !== undefined || b.reasoningTokens !== undefined) total.reasoningTokens = (a.reasoningTokens ?? 0) + (b.reasoningTokens ?? 0);
  return total;
}

function finishOf(reason: TurnEndReason, aborted: boolean): ModelChunk {
  switch (reason.kind) {
    case 'completed':
      return { type: 'finish', reason: 'stop' };
    case 'max-tokens':
      return { type: 'finish', reason: 'max-tokens' };
    case 'refusal':
      return { type: 'finish', reason: 'refusal' };
    case 'error':
      return { type: 'finish', reason: 'error', failure: reason.error };
    default:
      // Only the host cancels a resident child's turn; anything else stopping it is a failure.
      return aborted
        ? { type: 'finish', reason: 'aborted' }
        : { type: 'finish', reason: 'error', failure: { code: 'TURN_STOPPED', message: 'the child’s turn was stopped in its thread' } };
  }
}

/** Collects a turn's chunks as the child's events arrive; `chunks()` yields them until the finish. */
export class TurnRelay {
  readonly #signal: AbortSignal;
  readonly #queue: ModelChunk[] = [];
  #wake: (() => void) | undefined;
  #done = false;
  /** Text of the child's current step: the answer if the step calls no tool. */
  #text = '';
  #usage: Usage | undefined;
  #ended!: () => void;
  /** Resolves once the child's turn is over in its thread (or the thread is gone). */
  readonly ended = new Promise<void>((resolve) => (this.#ended = resolve));

  constructor(signal: AbortSignal) {
    this.#signal = signal;
  }

  /** Aborted when the host-side turn is cancelled. */
  get signal(): AbortSignal {
    return this.#signal;
  }

  #push(chunk: ModelChunk): void {
    this.#queue.push(chunk);
    this.#wake?.();
  }

  /** The child's new events (its turn's, in order). */
  events(events: readonly SessionEvent[]): void {
    for (const event of events) {
      if (this.#done) return;
      this.#event(event);
    }
  }

  #event(event: SessionEvent): void {
    switch (event.type) {
      case 'assistant/chunk': {
        const { chunk } = event.data as SessionEventMap['assistant/chunk'];
        if (chunk.type === 'text-delta') this.#text += chunk.text;
        else this.#push(chunk);
        return;
      }
      case 'assistant/message': {
        const data = event.data as SessionEventMap['assistant/message'];
        if (data.usage) this.#usage = sum(this.#usage, data.usage);
        this.#answer(data.content);
        return;
      }
      case 'tool/result': {
        const data = event.data as SessionEventMap['tool/result'];
        this.#push({ type: 'reasoning-delta', text: `[${data.name} ${data.isError ? 'failed' : '→'} ${note(textOf(data.content))}]\n` });
        return;
      }
      case 'turn/end': {
        this.#flushText();
        if (this.#usage) this.#push({ type: 'usage', usage: this.#usage });
        this.#finish(finishOf((event.data as SessionEventMap['turn/end']).reason, this.#signal.aborted));
        return;
      }
      default:
        return;
    }
  }

  /** A step's answer: its text is the turn's answer unless the step went on to call tools. */
  #answer(content: readonly ContentBlock[]): void {
    const calls = content.filter((block) => block.type === 'tool_call');
    if (calls.length === 0) return this.#flushText();
    if (this.#text !== '') this.#push({ type: 'reasoning-delta', text: `${this.#text}\n` });
    this.#text = '';
    for (const call of calls) this.#push({ type: 'reasoning-delta', text: `[tool ${call.name} ${note(JSON.stringify(call.input) ?? '')}]\n` });
  }

  #flushText(): void {
    if (this.#text !== '') this.#push({ type: 'text-delta', text: this.#text });
    this.#text = '';
  }

  #finish(chunk: ModelChunk): void {
    this.#done = true;
    this.#push(chunk);
    this.#ended();
  }

  /** The child's thread is gone: the turn ends `error` (or `aborted` when the host was cancelling it). */
  lost(why: string): void {
    if (this.#done) return;
    this.#flushText();
    if (this.#usage) this.#push({ type: 'usage', usage: this.#usage });
    this.#finish(this.#signal.aborted ? { type: 'finish', reason: 'aborted' } : { type: 'finish', reason: 'error', failure: { code: 'THREAD_FAILED', message: why } });
  }

  async *chunks(): AsyncGenerator<ModelChunk> {
    for (;;) {
      while (this.#queue.length > 0) {
        const chunk = this.#queue.shift()!;
        yield chunk;
        if (chunk.type === 'finish') return;
      }
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
  }
}
