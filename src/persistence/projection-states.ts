// The projection states both backends keep beside each session's log (identity and timing), folded
// forward by every append in the append's own transaction, and their JSON storage form.
import { z } from 'zod';
import { subagentIdentity, subagentTiming } from '../seam/projections.js';
import type { SubagentIdentityState, SubagentTimingState } from '../seam/projections.js';
import type { SessionEvent } from '../seam/session-types.js';
import { subagentUsage, type SubagentUsageState } from '../seam/usage.js';
import type { ProjectionViews } from '../runtime/session-persistence.js';
import { canonicalStates, canonicalViews } from './canonical-states.js';
import type { EncodedEvent } from './validate.js';

/** The stored states, keyed by projection name. */
export interface ProjectionStates {
  subagent: SubagentIdentityState;
  subagentTiming: SubagentTimingState;
  subagentUsage: SubagentUsageState;
}

const span = z.strictObject({ since: z.number(), through: z.number() });
const seq = z.int().nonnegative();
const count = z.int().nonnegative();

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
  // Added after the first release of this store: a row without it is rebuilt from its log once.
  // Stored as a tuple (see encodeUsage): every listed row carries it, so its length is read time.
  subagentUsage: z
    .tuple([z.literal(1), count, count, count, count, count, z.boolean(), z.number().nullable(), z.number().nullable(), z.number().nullable()])
    .transform(([version, inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen, since, through, pending]) => {
      const state: SubagentUsageState = { version, inputTokens, outputTokens, requests, turns, toolCalls, descriptorSeen };
      if (since !== null) state.since = since;
      if (through !== null) state.through = through;
      if (pending !== null) state.pendingTurnStart = pending;
      return state;
    }),
});

/** States of an empty log. */
export function initialStates(): ProjectionStates {
  return { subagent: subagentIdentity.initial(), subagentTiming: subagentTiming.initial(), subagentUsage: subagentUsage.initial() };
}

/** `states` advanced over `events`; `states` itself is left as it was. */
export function stepStates(states: ProjectionStates, events: Iterable<SessionEvent>): ProjectionStates {
  let identity = states.subagent;
  let timing = states.subagentTiming;
  let usage = states.subagentUsage;
  for (const event of events) {
    identity = subagentIdentity.step(identity, event);
    timing = subagentTiming.step(timing, event);
    usage = subagentUsage.step(usage, event);
  }
  return { subagent: identity, subagentTiming: timing, subagentUsage: usage };
}

/** What readers get: each projection's view of its state. */
export function viewsOf(states: ProjectionStates): ProjectionViews {
  return {
    subagent: subagentIdentity.view(states.subagent),
    subagentTiming: subagentTiming.view(states.subagentTiming),
    subagentUsage: subagentUsage.view(states.subagentUsage),
  };
}

/**
 * The storage form (JSON text) of `states`, keys in one fixed order whatever order the state objects
 * hold them in, so every row this store writes takes the fast path of {@link decodeStates}.
 */
export function encodeStates(states: ProjectionStates): string {
  const { identity } = states.subagent;
  const timing = states.subagentTiming;
  const storedTiming: SubagentTimingState = {
    version: timing.version,
    settledMs: timing.settledMs,
    descriptorSeen: timing.descriptorSeen,
  };
  if (timing.active !== undefined) storedTiming.active = { since: timing.active.since, through: timing.active.through };
  if (timing.pendingTurnStart !== undefined) storedTiming.pendingTurnStart = timing.pendingTurnStart;
  return JSON.stringify({
    subagent: {
      version: states.subagent.version,
      identity:
        identity === null
          ? null
          : identity.label === undefined
            ? { mode: identity.mode, seq: identity.seq }
            : { mode: identity.mode, label: identity.label, seq: identity.seq },
    },
    subagentTiming: storedTiming,
    subagentUsage: encodeUsage(states.subagentUsage),
  });
}

/**
 * The usage state's storage form: `[version, inputTokens, outputTokens, requests, turns, toolCalls,
 * descriptorSeen, since, through, pendingTurnStart]`, absent times as null.
 */
function encodeUsage(usage: SubagentUsageState): unknown[] {
  return [
    usage.version,
    usage.inputTokens,
    usage.outputTokens,
    usage.requests,
    usage.turns,
    usage.toolCalls,
    usage.descriptorSeen,
    usage.since ?? null,
    usage.through ?? null,
    usage.pendingTurnStart ?? null,
  ];
}

/** Stored states, or undefined when the text is missing, malformed or of another version. */
export function decodeStates(text: string | null): ProjectionStates | undefined {
  if (text === null) return undefined;
  return canonicalStates(text) ?? parseStates(text);
}

/** Stored states through JSON.parse and the schema: the path for any text not in canonical form. */
function parseStates(text: string): ProjectionStates | undefined {
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
 * The views of stored states (see {@link decodeStates}). The decoded objects are fresh and owned by
 * nobody else, so the views take them over instead of copying them as {@link viewsOf} must.
 */
export function decodeViews(text: string | null): ProjectionViews | undefined {
  if (text === null) return undefined;
  const views = canonicalViews(text);
  if (views !== undefined) return views;
  const states = parseStates(text);
  if (states === undefined) return undefined;
  const { settledMs, active } = states.subagentTiming;
  return {
    subagent: states.subagent.identity,
    subagentTiming: active === undefined ? { settledMs } : { settledMs, active },
    subagentUsage: subagentUsage.view(states.subagentUsage),
  };
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
