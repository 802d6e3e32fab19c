// The projection states both backends keep beside each session's log (identity and timing), folded
// forward by every append in the append's own transaction, and their JSON storage form.
import { z } from 'zod';
import { subagentIdentity, subagentTiming } from '../seam/projections.js';
import type { SubagentIdentityState, SubagentTimingState } from '../seam/projections.js';
import type { SessionEvent } from '../seam/session-types.js';
import type { ProjectionViews } from '../runtime/session-persistence.js';
import type { EncodedEvent } from './validate.js';

/** The stored states, keyed by projection name. */
export interface ProjectionStates {
  subagent: SubagentIdentityState;
  subagentTiming: SubagentTimingState;
}

const span = z.strictObject({ since: z.number(), through: z.number() });
const seq = z.int().nonnegative();

// Stored JSON is a trust boundary. A state of another version (see `SessionProjection.version`)
// fails here and is rebuilt from the log.
const statesSchema = z.strictObject({
  subagent: z.strictObject({
    version: z.literal(2),
    identity: z
      .discriminatedUnion('mode', [
        z.strictObject({ mode: z.literal('one-shot'), label: z.string().exactOptional(), seq }),
        z.strictObject({ mode: z.literal('continuable'), label: z.string(), seq }),
      ])
      .nullable(),
  }),
  subagentTiming: z.strictObject({
    version: z.literal(2),
    settledMs: z.number(),
    active: span.exactOptional(),
    pendingTurnStart: z.number().exactOptional(),
    descriptorSeen: z.boolean(),
  }),
});

/** States of an empty log. */
export function initialStates(): ProjectionStates {
  return { subagent: subagentIdentity.initial(), subagentTiming: subagentTiming.initial() };
}

/** `states` advanced over `events`; `states` itself is left as it was. */
export function stepStates(states: ProjectionStates, events: Iterable<SessionEvent>): ProjectionStates {
  let identity = states.subagent;
  let timing = states.subagentTiming;
  for (const event of events) {
    identity = subagentIdentity.step(identity, event);
    timing = subagentTiming.step(timing, event);
  }
  return { subagent: identity, subagentTiming: timing };
}

/** What readers get: each projection's view of its state. */
export function viewsOf(states: ProjectionStates): ProjectionViews {
  return { subagent: subagentIdentity.view(states.subagent), subagentTiming: subagentTiming.view(states.subagentTiming) };
}

/** The storage form (JSON text) of `states`. */
export function encodeStates(states: ProjectionStates): string {
  return JSON.stringify(states);
}

/** Stored states, or undefined when the text is missing, malformed or of another version. */
export function decodeStates(text: string | null): ProjectionStates | undefined {
  if (text === null) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const result = statesSchema.safeParse(value);
  return result.success ? result.data : undefined;
}

/**
 * An encoded event as the folds see it. Its data is parsed only if a fold reads it: the identity
 * fold reads descriptors only, so committing a batch of large messages parses none of them.
 */
export function lazyEvent(event: EncodedEvent): SessionEvent {
  let parsed: { value: unknown } | undefined;
  return {
    seq: event.seq,
    time: event.time,
    type: event.type,
    get data(): unknown {
      parsed ??= { value: JSON.parse(event.data) as unknown };
      return parsed.value;
    },
  };
}
