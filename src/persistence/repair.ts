// Crash repair: the closers that end a turn a crash left open, so a resumed session always starts
// from a closed turn and every assistant tool call has its result (providers reject orphans).
import { z } from 'zod';
import type { SessionId } from '../seam/content.js';
import { SubagentError } from '../seam/errors.js';
import { parseOrThrow } from '../seam/parse.js';
import type { SessionEvent, SessionEventMap } from '../seam/session-types.js';
import { corrupt } from './validate.js';

/** Code of a synthetic result for a call that never logged `tool/call`: it did not run. */
export const TOOL_NOT_STARTED = 'TOOL_NOT_STARTED';
/** Code of a synthetic result for a call that logged `tool/call` but no result: it may have run. */
export const TOOL_OUTCOME_UNKNOWN = 'TOOL_OUTCOME_UNKNOWN';

const NOT_STARTED_TEXT =
  'This tool call never started: the session was interrupted before it ran, so it should have had ' +
  'no effect. If it has side effects, verify they did not happen before retrying it.';
const OUTCOME_UNKNOWN_TEXT =
  'This tool call was interrupted while running and its outcome is unknown: it may have partly or ' +
  'fully taken effect. Verify its side effects before retrying it.';

// Only the fields repair reads are checked; anything else in the data is left alone.
const turnSchema = z.object({ turn: z.number() });
const stepSchema = z.object({ turn: z.number(), step: z.number() });
const callSchema = z.object({ callId: z.string() });
const toolCallBlock = z.object({ type: z.literal('tool_call'), id: z.string(), name: z.string() });
const messageSchema = z.object({
  turn: z.number(),
  step: z.number(),
  content: z.array(z.looseObject({ type: z.string() })),
});

interface PendingCall { turn: number; step: number; callId: string; name: string }

function dataOf<T>(event: SessionEvent, schema: z.ZodType<T>): T {
  return parseOrThrow(schema, event.data, 'CORRUPT_DATA', `event ${event.seq} (${event.type}) data`);
}

/**
 * The events that close a turn left open at the end of `events` (a `turn/start` without its
 * `turn/end`), or `[]` when the log ends outside a turn. Closers continue the seqs and reuse the
 * last event's time: a synthetic error `tool/result` per unanswered assistant tool call (coded
 * `TOOL_NOT_STARTED` or `TOOL_OUTCOME_UNKNOWN`), `step/end` if a step is open, then
 * `turn/end` with reason `interrupted`. Pure: `events` is not modified.
 * @throws SubagentError `CORRUPT_DATA` when an event repair reads has malformed data.
 */
export function closeInterruptedTurn(events: readonly SessionEvent[]): SessionEvent[] {
  let turnStart = -1;
  let openTurn = 0;
  for (const [index, event] of events.entries()) {
    if (event.type === 'turn/start') {
      turnStart = index;
      openTurn = dataOf(event, turnSchema).turn;
    } else if (event.type === 'turn/end') {
      turnStart = -1;
    }
  }
  const last = events.at(-1);
  if (turnStart < 0 || last === undefined) return [];

  const calls: PendingCall[] = [];
  const started = new Set<string>();
  const answered = new Set<string>();
  let openStep: { turn: number; step: number } | undefined;
  for (const event of events.slice(turnStart + 1)) {
    switch (event.type) {
      case 'step/start':
        openStep = dataOf(event, stepSchema);
        break;
      case 'step/end':
        openStep = undefined;
        break;
      case 'tool/call':
        started.add(dataOf(event, callSchema).callId);
        break;
      case 'tool/result':
        answered.add(dataOf(event, callSchema).callId);
        break;
      case 'assistant/message': {
        const message = dataOf(event, messageSchema);
        for (const block of message.content) {
          if (block.type !== 'tool_call') continue;
          const call = dataOf({ ...event, data: block }, toolCallBlock);
          calls.push({ turn: message.turn, step: message.step, callId: call.id, name: call.name });
        }
        break;
      }
      default:
        // Every other event type, built-in or custom, leaves the turn's open state unchanged.
        break;
    }
  }

  const closers: SessionEvent[] = [];
  const push = (type: string, data: unknown): void => {
    closers.push({ seq: last.seq + 1 + closers.length, time: last.time, type, data });
  };
  for (const call of calls) {
    if (answered.has(call.callId)) continue;
    const wasStarted = started.has(call.callId);
    const result: SessionEventMap['tool/result'] = {
      turn: call.turn,
      step: call.step,
      callId: call.callId,
      name: call.name,
      content: [{ type: 'text', text: wasStarted ? OUTCOME_UNKNOWN_TEXT : NOT_STARTED_TEXT }],
      isError: true,
      code: wasStarted ? TOOL_OUTCOME_UNKNOWN : TOOL_NOT_STARTED,
    };
    push('tool/result', result);
    answered.add(call.callId);
  }
  if (openStep !== undefined) {
    const stepEnd: SessionEventMap['step/end'] = { turn: openStep.turn, step: openStep.step };
    push('step/end', stepEnd);
  }
  const turnEnd: SessionEventMap['turn/end'] = { turn: openTurn, reason: { kind: 'interrupted' } };
  push('turn/end', turnEnd);
  return closers;
}

/** {@link closeInterruptedTurn} for stored session `id`: a `CORRUPT_DATA` error names the session. */
export function closersFor(id: SessionId, events: readonly SessionEvent[]): SessionEvent[] {
  try {
    return closeInterruptedTurn(events);
  } catch (error) {
    throw error instanceof SubagentError && error.code === 'CORRUPT_DATA' ? corrupt(id, error.message, error) : error;
  }
}
