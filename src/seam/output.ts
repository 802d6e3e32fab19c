// What a child "said": the output rule shared by results and end events, and the bound on
// diagnostics. Pure functions over session events, used on both sides of every boundary.
import type { ContentBlock } from './content.js';
import type { SessionEvent, SessionEventMap } from './session-types.js';

/** Largest diagnostic, in UTF-8 bytes. */
export const DIAGNOSTIC_LIMIT_BYTES = 4096;
/** Appended to a diagnostic that was cut. */
export const DIAGNOSTIC_TRUNCATION_MARKER = '\n[diagnostic truncated]';

/**
 * Folds a child's own events into its output: the last non-empty assistant message wins;
 * failing that, the streamed text deltas joined into one text block; failing that, nothing.
 */
export class AssistantOutputFold {
  #message: ContentBlock[] | undefined;
  #deltas = '';

  push(event: SessionEvent): void {
    if (event.type === 'assistant/message') {
      const { content } = event.data as SessionEventMap['assistant/message'];
      if (content.length > 0) this.#message = content;
    } else if (event.type === 'assistant/chunk') {
      const { chunk } = event.data as SessionEventMap['assistant/chunk'];
      if (chunk.type === 'text-delta') this.#deltas += chunk.text;
    }
  }

  /** Adds raw text to the fallback (transports without messages); empty text is ignored. */
  pushText(value: string): void {
    this.#deltas += value;
  }

  /** The output, or undefined when nothing was said. */
  collect(): ContentBlock[] | undefined {
    if (this.#message) return this.#message;
    return this.#deltas === '' ? undefined : [{ type: 'text', text: this.#deltas }];
  }
}

/** The output of a whole event suffix (`[]` when nothing was said). */
export function finalAssistantOutput(events: readonly SessionEvent[]): ContentBlock[] {
  const fold = new AssistantOutputFold();
  for (const event of events) fold.push(event);
  return fold.collect() ?? [];
}

const encoder = new TextEncoder();

/**
 * Bounds a diagnostic to 4096 UTF-8 bytes: a longer one keeps a prefix, backed off so no
 * multi-byte character is split, plus a visible marker. Exactly 4096 bytes is kept unchanged.
 */
export function limitDiagnostic(value: string): string {
  const bytes = encoder.encode(value);
  if (bytes.length <= DIAGNOSTIC_LIMIT_BYTES) return value;
  let end = DIAGNOSTIC_LIMIT_BYTES - encoder.encode(DIAGNOSTIC_TRUNCATION_MARKER).length;
  // Back off continuation bytes (10xxxxxx) so the cut lands on a character boundary.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end--;
  return new TextDecoder().decode(bytes.subarray(0, end)) + DIAGNOSTIC_TRUNCATION_MARKER;
}
