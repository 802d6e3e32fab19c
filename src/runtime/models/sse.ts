// Incremental server-sent-events decoder: bytes in, the `data` payload of each complete event out.
// Only what chat-completion streams use; `event`, `id` and `retry` fields are read and ignored.

/** Decodes an SSE byte stream chunk by chunk; multi-byte characters may straddle chunks. */
export class SseDecoder {
  #decoder = new TextDecoder('utf-8');
  #buffer = '';
  #data: string[] = [];

  /** Feeds bytes; returns the payloads of the events completed by them, in order. */
  push(bytes: Uint8Array): string[] {
    this.#buffer += this.#decoder.decode(bytes, { stream: true });
    return this.#drain(false);
  }

  /**
   * Ends the stream; returns what a final unterminated event held. The spec discards such an
   * event, but servers that close right after `data: [DONE]` without a blank line are common.
   */
  end(): string[] {
    this.#buffer += this.#decoder.decode();
    const events = this.#drain(true);
    if (this.#buffer !== '') this.#line(this.#buffer, events);
    this.#buffer = '';
    this.#line('', events);
    return events;
  }

  #drain(final: boolean): string[] {
    const events: string[] = [];
    const buffer = this.#buffer;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const code = buffer.charCodeAt(i);
      if (code !== 10 && code !== 13) continue;
      // A lone trailing CR may be the first half of a CRLF split across two reads.
      if (code === 13 && i + 1 === buffer.length && !final) break;
      this.#line(buffer.slice(start, i), events);
      if (code === 13 && buffer.charCodeAt(i + 1) === 10) i++;
      start = i + 1;
    }
    this.#buffer = buffer.slice(start);
    return events;
  }

  #line(line: string, events: string[]): void {
    if (line === '') {
      // As the spec: an event whose data is empty (a bare `data:`) is not dispatched.
      const data = this.#data.join('\n');
      if (data !== '') events.push(data);
      this.#data = [];
      return;
    }
    if (line.startsWith(':')) return; // comment: a keep-alive
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.#data.push(value);
  }
}
