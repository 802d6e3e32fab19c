// Incremental server-sent-events decoder: bytes in, the type and `data` payload of each complete
// event out. Only what chat-completion streams use; `id` and `retry` fields are read and ignored.

/**
 * The most characters one event may hold (its data lines, or a line not yet ended). A completion
 * chunk is a few hundred bytes; a server streaming one endless line would otherwise grow memory
 * without bound while every read resets the idle timer.
 */
export const MAX_EVENT_CHARS = 16 * 1024 * 1024;

/** One dispatched event: its `event` field (`message` when it has none) and its data. */
export interface SseEvent {
  type: string;
  data: string;
}

/** Decodes an SSE byte stream chunk by chunk; multi-byte characters and line ends may straddle chunks. */
export class SseDecoder {
  #decoder = new TextDecoder('utf-8');
  /** The pieces of the line not yet ended, kept apart so a long line is not copied on every read. */
  #pending: string[] = [];
  #data: string[] = [];
  #type = '';
  /** Characters held for the current event: its data lines and the pending line. */
  #size = 0;
  /** The last character read ended a line with CR: an LF right after it belongs to that line end. */
  #afterCR = false;
  #tooLong = false;

  /** True once an event exceeded MAX_EVENT_CHARS; the decoder then returns nothing more. */
  get tooLong(): boolean {
    return this.#tooLong;
  }

  /** Feeds bytes; returns the events completed by them, in order. */
  push(bytes: Uint8Array): SseEvent[] {
    const events: SseEvent[] = [];
    this.#feed(this.#decoder.decode(bytes, { stream: true }), events);
    return events;
  }

  /**
   * Ends the stream; returns what a final unterminated event held. The spec discards such an
   * event, but servers that close right after `data: [DONE]` without a blank line are common.
   */
  end(): SseEvent[] {
    const events: SseEvent[] = [];
    this.#feed(this.#decoder.decode(), events);
    if (this.#tooLong) return events;
    if (this.#pending.length > 0) this.#line(this.#take(''), events);
    this.#line('', events);
    return events;
  }

  /** Splits new text into lines; only the new text is scanned, so reads of one long line cost linear time. */
  #feed(text: string, events: SseEvent[]): void {
    if (this.#tooLong || text === '') return;
    let start = 0;
    if (this.#afterCR && text.charCodeAt(0) === 10) start = 1; // the LF of a CRLF split between reads
    for (let i = start; i < text.length; i++) {
      const code = text.charCodeAt(i);
      if (code !== 10 && code !== 13) continue;
      this.#line(this.#take(text.slice(start, i)), events);
      if (code === 13 && text.charCodeAt(i + 1) === 10) i++;
      start = i + 1;
    }
    this.#afterCR = text.charCodeAt(text.length - 1) === 13;
    if (start < text.length && !this.#tooLong) {
      this.#pending.push(text.slice(start));
      this.#grow(text.length - start);
    }
  }

  /** The pending line completed by `last`. */
  #take(last: string): string {
    if (this.#pending.length === 0) return last;
    this.#pending.push(last);
    const line = this.#pending.join('');
    this.#size -= line.length - last.length;
    this.#pending = [];
    return line;
  }

  #grow(chars: number): void {
    this.#size += chars;
    if (this.#size <= MAX_EVENT_CHARS) return;
    this.#tooLong = true;
    this.#pending = [];
    this.#data = [];
  }

  #line(line: string, events: SseEvent[]): void {
    if (this.#tooLong) return;
    if (line === '') {
      // As the spec: an event whose data is empty (a bare `data:`) is not dispatched.
      const data = this.#data.join('\n');
      if (data !== '') events.push({ type: this.#type || 'message', data });
      this.#data = [];
      this.#type = '';
      this.#size = 0;
      return;
    }
    if (line.startsWith(':')) return; // comment: a keep-alive
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data' && field !== 'event') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') {
      // Only compared with `error`: a long type is not kept whole.
      this.#type = value.slice(0, 64);
      return;
    }
    this.#data.push(value);
    this.#grow(value.length + 1);
  }
}
