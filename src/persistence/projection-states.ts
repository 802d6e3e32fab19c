// The projection states both backends keep beside each session's log (identity, timing, usage),
// folded forward by every append in the append's own transaction. The SQLite store keeps them in
// typed columns (state-columns.ts).
import { subagentIdentity, subagentTiming } from '../seam/projections.js';
import type { SubagentIdentityState, SubagentTimingState } from '../seam/projections.js';
import type { SessionEvent } from '../seam/session-types.js';
import { subagentUsage, type SubagentUsageState } from '../seam/usage.js';
import type { ListedProjections, ProjectionViews } from '../runtime/session-persistence.js';
import type { EncodedEvent } from './validate.js';

/** The stored states, keyed by projection name. */
export interface ProjectionStates {
  subagent: SubagentIdentityState;
  subagentTiming: SubagentTimingState;
  subagentUsage: SubagentUsageState;
}

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

/** What a listing shows of `states`. */
export function listedOf(states: ProjectionStates): ListedProjections {
  const { identity } = states.subagent;
  return { mode: identity?.mode ?? null, label: identity?.label, usage: subagentUsage.view(states.subagentUsage) };
}

/**
 * An encoded event as the folds see it. Its data is parsed only if a fold reads it: the identity
 * fold reads descriptors and the usage fold assistant messages, so other events (tool results,
 * user messages) are committed without being parsed.
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
