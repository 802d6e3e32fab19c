// How much a worker thread can be handed at once. A thread holds what it starts from (a fork's
// seed, a resident child's log, a prompt) as text and as what it parses from it, larger than the
// text, while it takes it in (a log's events cross one text each and each text goes as its event
// is made, see seam/event-texts.ts; the events become the log as they are, uncopied), so more than
// a quarter of its heap limit never fits (measured: past that, the child ran out of memory; from
// about half of it, and for a payload about the size of the heap limit as the thread received it,
// V8 aborted the whole process, which Node cannot contain). Such payloads are refused before any
// thread holds them. V8 keeps a string with any character past U+00FF at two bytes a character.
//
// A thread that already runs a child gets less, whatever its limit: that child may have filled the
// heap, and Node then lets the thread use only 16 MB more to end. A payload arriving then that did
// not fit that leeway with what the thread made of it aborted the whole process (measured with
// limits of 128 and 256 MB: a 20 MB host tool result or message to a running child, a 12 MB prompt
// to a thread shared with one; at 8 MB the child ran out of memory and the host went on).
import { encode } from '../../seam/codec.js';
import { SubagentError, describeError, type SubagentErrorCode } from '../../seam/errors.js';
import type { ToolResultContent } from '../../runtime/tool-registry.js';

const WIDE = /[\u0100-\uffff]/;

/** The most a thread that may already run a child (see above) is handed at once, in megabytes. */
export const RUNNING_THREAD_MB = 8;

/** What a thread is handed: one text, or several (a log's events, one text each, and what comes with them). */
export type ThreadText = string | readonly string[];

/** How `text` is handed over: `running` when the thread may already run a child (its heap may be full). */
export interface ThreadFit {
  code?: SubagentErrorCode;
  running?: boolean;
}

const MB = 2 ** 20;

/** The bytes `text` takes in a thread's heap. */
function heapBytes(text: string): number {
  return WIDE.test(text) ? 2 * text.length : text.length;
}

/** The bytes `text` takes in a thread's heap when that is more than `bound`, else undefined. */
function bytesOver(text: ThreadText, bound: number): number | undefined {
  const texts = typeof text === 'string' ? [text] : text;
  let length = 0;
  for (const part of texts) length += part.length;
  if (2 * length <= bound) return undefined;
  let bytes = 0;
  for (const part of texts) bytes += heapBytes(part);
  return bytes > bound ? bytes : undefined;
}

/** The megabytes `text` takes in a thread's heap when that is more than a quarter of `heapLimitMb`, else undefined. */
export function tooLargeForThread(text: ThreadText, heapLimitMb: number | undefined): string | undefined {
  if (heapLimitMb === undefined) return undefined;
  const bytes = bytesOver(text, (heapLimitMb * MB) / 4);
  return bytes === undefined ? undefined : (bytes / MB).toFixed(1);
}

/** The most bytes a thread with `heapLimitMb` is handed at once; `running`: one that may already run a child. */
function boundOf(heapLimitMb: number, running: boolean | undefined): number {
  const quarter = (heapLimitMb * MB) / 4;
  return running ? Math.min(quarter, RUNNING_THREAD_MB * MB) : quarter;
}

/** The refusal of `bytes` of `what` that a thread with `heapLimitMb` cannot take (see `assertFitsThread`). */
function refusal(what: string, bytes: number, heapLimitMb: number, remedy: string, fit: ThreadFit): SubagentError {
  const size = `${what} (${(bytes / MB).toFixed(1)} MB encoded)`;
  // Past the running bound a higher limit does not help: the payload must shrink.
  if (fit.running && bytes > RUNNING_THREAD_MB * MB) {
    return new SubagentError(
      fit.code ?? 'INVALID_REQUEST',
      `${size} is too large for a worker thread that may already run a child (pool.resourceLimits.maxOldGenerationSizeMb ${heapLimitMb}): such a thread takes at most ${RUNNING_THREAD_MB} MB at once, whatever that limit; ${remedy}`,
    );
  }
  return new SubagentError(
    fit.code ?? 'INVALID_REQUEST',
    `${size} is too large for a worker thread with pool.resourceLimits.maxOldGenerationSizeMb ${heapLimitMb}; raise that limit (to at least 4 × that size) or ${remedy}`,
  );
}

/** Throws (`INVALID_REQUEST` unless `fit.code`) naming `what` when `text` would not fit a thread with `heapLimitMb`. */
export function assertFitsThread(what: string, text: ThreadText, heapLimitMb: number | undefined, remedy: string, fit: ThreadFit = {}): void {
  if (heapLimitMb === undefined) return;
  const bytes = bytesOver(text, boundOf(heapLimitMb, fit.running));
  if (bytes !== undefined) throw refusal(what, bytes, heapLimitMb, remedy, fit);
}

/**
 * Throws `INVALID_REQUEST` naming `what` when one text of a fork's seed is more than a thread that
 * may already run a child takes at once. Its texts arrive in one message, each made whole as it is
 * read: many small ones (56 MB of 7 MB texts with a 256 MB limit) at a child within 16 MB of its
 * limit ran that child out of memory, one of 20 MB aborted the whole process.
 */
export function assertEventsFitRunning(what: string, texts: readonly string[], heapLimitMb: number | undefined, remedy: string): void {
  if (heapLimitMb === undefined) return;
  const bound = boundOf(heapLimitMb, true);
  for (const text of texts) {
    const bytes = bytesOver(text, bound);
    if (bytes !== undefined) throw refusal(what, bytes, heapLimitMb, `${remedy}, or set pool.childrenPerThread to 1`, { running: true });
  }
}

/** A host tool's result, unless it is too large to hand to the calling child's thread (`CONTRACT_VIOLATION`, the call's error). */
export function resultForThread<T extends ToolResultContent>(name: string, result: T, heapLimitMb: number | undefined): T {
  // Tool results are plain JSON, checked as the tool returned them: this cannot throw.
  if (heapLimitMb !== undefined) assertFitsThread(`the result of tool ${name}`, JSON.stringify(result.content), heapLimitMb, 'have the tool return less', { code: 'CONTRACT_VIOLATION', running: true });
  return result;
}

/** The text an error thrown to a thread crosses as (see wire-channel.ts: one the codec refuses crosses described). */
function thrownText(error: unknown): string {
  try {
    return JSON.stringify(encode(error));
  } catch {
    return describeError(error);
  }
}

/**
 * What a host tool's call throws to the calling child's thread: its error, unless that is too large
 * to hand over (a message or cause of many megabytes): then a `CONTRACT_VIOLATION` saying so.
 */
export function errorForThread(name: string, error: unknown, heapLimitMb: number | undefined): unknown {
  if (heapLimitMb === undefined) return error;
  try {
    assertFitsThread(`the error of tool ${name}`, thrownText(error), heapLimitMb, 'have the tool throw less', { code: 'CONTRACT_VIOLATION', running: true });
    return error;
  } catch (refusal) {
    return refusal;
  }
}

/** Refuses (`INVALID_REQUEST`) input for a running child that its thread cannot take (see above). */
export function assertMessageFits(content: unknown, heapLimitMb: number | undefined): void {
  // Input is plain JSON, checked where it entered: this cannot throw.
  if (heapLimitMb !== undefined) assertFitsThread('the message', JSON.stringify(content), heapLimitMb, 'send less', { running: true });
}

/**
 * `messages` in runs that each fit a thread that may already run a child, in order, to be handed
 * over one run at a time: messages each within that bound (as every one is where it was accepted)
 * but together over it reach the thread whole. Throws `INVALID_REQUEST` for one message over it.
 * Without a heap limit, all of them in one run.
 */
export function messageRuns<T>(messages: readonly T[], heapLimitMb: number | undefined): T[][] {
  if (heapLimitMb === undefined) return [[...messages]];
  const bound = boundOf(heapLimitMb, true);
  const runs: T[][] = [[]];
  let size = 0;
  for (const message of messages) {
    // Input is plain JSON, checked where it entered: this cannot throw.
    const bytes = heapBytes(JSON.stringify(message));
    if (bytes > bound) throw refusal('the message', bytes, heapLimitMb, 'send less', { running: true });
    if (size + bytes > bound) {
      runs.push([]);
      size = 0;
    }
    runs.at(-1)!.push(message);
    size += bytes;
  }
  return runs;
}
