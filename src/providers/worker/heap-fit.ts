// How much a worker thread can be handed at once. A thread holds what it starts from (a fork's
// seed, a resident child's log, a prompt) as text and as what it parses from it, larger than the
// text, while it takes it in (a log's events cross one text each and each text goes as its event
// is made, see seam/event-texts.ts; the events become the log as they are, uncopied), so more than
// a quarter of its heap limit never fits (measured: past that, the child ran out of memory; from
// about half of it, and for a payload about the size of the heap limit as the thread received it,
// V8 aborted the whole process, which Node cannot contain). Such payloads are refused before any
// thread holds them. V8 keeps a string with any character past U+00FF at two bytes a character.
import { SubagentError, type SubagentErrorCode } from '../../seam/errors.js';
import type { ToolResultContent } from '../../runtime/tool-registry.js';

const WIDE = /[\u0100-\uffff]/;

/** What a thread is handed: one text, or several (a log's events, one text each, and what comes with them). */
export type ThreadText = string | readonly string[];

/** The megabytes `text` takes in a thread's heap when that is more than a quarter of `heapLimitMb`, else undefined. */
export function tooLargeForThread(text: ThreadText, heapLimitMb: number | undefined): string | undefined {
  if (heapLimitMb === undefined) return undefined;
  const texts = typeof text === 'string' ? [text] : text;
  const bound = (heapLimitMb * 2 ** 20) / 4;
  let length = 0;
  for (const part of texts) length += part.length;
  if (2 * length <= bound) return undefined;
  let bytes = 0;
  for (const part of texts) bytes += WIDE.test(part) ? 2 * part.length : part.length;
  return bytes > bound ? (bytes / 2 ** 20).toFixed(1) : undefined;
}

/** Throws `code` (`INVALID_REQUEST`) naming `what` when `text` would not fit a thread with `heapLimitMb`. */
export function assertFitsThread(what: string, text: ThreadText, heapLimitMb: number | undefined, remedy: string, code: SubagentErrorCode = 'INVALID_REQUEST'): void {
  const mb = tooLargeForThread(text, heapLimitMb);
  if (mb === undefined) return;
  throw new SubagentError(
    code,
    `${what} (${mb} MB encoded) is too large for a worker thread with pool.resourceLimits.maxOldGenerationSizeMb ${heapLimitMb}; raise that limit (to at least 4 × that size) or ${remedy}`,
  );
}

/** A host tool's result, unless it is too large to hand to the calling child's thread (`CONTRACT_VIOLATION`, the call's error). */
export function resultForThread<T extends ToolResultContent>(name: string, result: T, heapLimitMb: number | undefined): T {
  // Tool results are plain JSON, checked as the tool returned them: this cannot throw.
  if (heapLimitMb !== undefined) assertFitsThread(`the result of tool ${name}`, JSON.stringify(result.content), heapLimitMb, 'have the tool return less', 'CONTRACT_VIOLATION');
  return result;
}
