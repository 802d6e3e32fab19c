// A log crossing into a worker thread (a fork's seed, a continuable child's completed turns) as
// codec text one event at a time. The thread parses them in order and lets each text go as its
// event is made, so it never holds the whole log's text beside the whole log: one text for the
// log was held until its last event was parsed, and for a log of many small events (a streamed
// answer is one per word) the two took about 2.5 times the text, near a thread's heap limit for
// a log within the quarter of it that heap-fit.ts lets in. An object two events share (a prompt's
// content in its inbox and user events) comes back as a copy in each: the one text restored one.
import { parse, stringify } from './codec.js';
import { deepFreeze, describeKind } from './content.js';
import { SubagentError } from './errors.js';
import { isRecord } from './parse.js';
import type { SessionEvent } from './session-types.js';

/** `events` as codec text, one `stringify` each. */
export function eventTexts(events: readonly SessionEvent[]): string[] {
  return events.map((event) => stringify(event));
}

/**
 * The events `texts` hold, parsed and frozen (they become a log as they are, uncopied). Each text
 * is dropped from `texts` as its event is made: the caller must not use `texts` afterwards.
 */
export function takeEvents(texts: string[]): SessionEvent[] {
  if (!Array.isArray(texts)) throw notALog(`crossed as ${describeKind(texts)}, not as a list of event texts`);
  const events = new Array<SessionEvent>(texts.length);
  for (let index = 0; index < texts.length; index++) {
    const event = parse<unknown>(texts[index]!);
    if (!isRecord(event)) throw notALog(`holds ${describeKind(event)} at ${index}, not an event`);
    events[index] = deepFreeze(event as unknown as SessionEvent);
    texts[index] = '';
  }
  texts.length = 0;
  return events;
}

function notALog(what: string): SubagentError {
  return new SubagentError('CORRUPT_DATA', `a log handed to this child ${what}; it was not written by a host of this version`);
}
