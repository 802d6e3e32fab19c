// The two subagent projections of seam-spec §6.6–6.7 as pure incremental folds over a session log.
// States are plain JSON (they are cached in SQLite) and carry a version so a stale cache is detectable;
// `step` returns the very same state object when an event changes nothing, so callers can skip writes.
import { DESCRIPTOR_EVENT, parseSubagentDescriptor } from './descriptor.js';
import { SEED_END_EVENT, type SessionEvent } from './session-types.js';

/** A fold of a session log into a view. `step` never throws and never mutates `state`. */
export interface SessionProjection<S, V> {
  /** Key of the projection's value in a projection snapshot. */
  readonly name: string;
  /** Version of the state shape; a cached state of another version must be rebuilt. */
  readonly version: number;
  initial(): S;
  step(state: S, event: SessionEvent): S;
  view(state: S): V;
}

/** What the log says a child is: its mode, label and the seq of the descriptor that said so. */
export type SubagentIdentity =
  | { mode: 'one-shot'; label?: string; seq: number }
  | { mode: 'continuable'; label: string; seq: number };

export interface SubagentIdentityState { version: 2; identity: SubagentIdentity | null }

/** Busy time of a child: settled turns, plus the open turn (if any) from `since` to the latest event. */
export interface SubagentTiming { settledMs: number; active?: { since: number; through: number } }

export interface SubagentTimingState {
  version: 2;
  settledMs: number;
  active?: { since: number; through: number };
  /** Start of a turn seen before the descriptor; the descriptor adopts it. */
  pendingTurnStart?: number;
  descriptorSeen: boolean;
}

/**
 * Identity projection: the LAST descriptor wins; an unreadable one clears it (the view is then null).
 * A fork's `session/end-seed` clears it too: a descriptor in its seed is an ancestor's, not the fork's.
 */
export const subagentIdentity: SessionProjection<SubagentIdentityState, SubagentIdentity | null> = {
  name: 'subagent',
  version: 2,
  initial: () => ({ version: 2, identity: null }),
  step(state, event) {
    if (event.type === SEED_END_EVENT) return state.identity === null ? state : { version: 2, identity: null };
    if (event.type !== DESCRIPTOR_EVENT) return state;
    const identity = identityOf(event);
    if (identity === null && state.identity === null) return state;
    return { version: 2, identity };
  },
  // null, never undefined: a JSON transport must carry the reset, not drop the key.
  view: (state) => (state.identity === null ? null : { ...state.identity }),
};

// Resume reads the FIRST descriptor (foldSubagentDescriptor) and fails loudly; the projection is
// last-wins and never throws, because it describes the log as it is, even a damaged one.
function identityOf(event: SessionEvent): SubagentIdentity | null {
  let data;
  try {
    data = parseSubagentDescriptor(event.data);
  } catch {
    return null;
  }
  if (data === undefined) return null;
  if (data.mode === 'continuable') return { mode: 'continuable', label: data.label, seq: event.seq };
  return data.label === undefined
    ? { mode: 'one-shot', seq: event.seq }
    : { mode: 'one-shot', label: data.label, seq: event.seq };
}

/**
 * Timing projection. Turns before the descriptor belong to an inherited prefix and are not counted,
 * except a turn still open when the descriptor arrives (the child's own first turn); each descriptor
 * restarts the count.
 */
export const subagentTiming: SessionProjection<SubagentTimingState, SubagentTiming> = {
  name: 'subagentTiming',
  version: 2,
  initial: () => ({ version: 2, settledMs: 0, descriptorSeen: false }),
  step(state, event) {
    const time = event.time;
    switch (event.type) {
      case 'turn/start':
        return state.descriptorSeen
          ? { ...withoutOpenTurn(state), active: { since: time, through: time } }
          : { ...withoutOpenTurn(state), pendingTurnStart: time };
      case DESCRIPTOR_EVENT: {
        const since = state.active?.since ?? state.pendingTurnStart;
        const next: SubagentTimingState = { version: 2, settledMs: 0, descriptorSeen: true };
        if (since !== undefined) next.active = { since, through: time };
        return next;
      }
      case 'turn/end':
        if (!state.descriptorSeen) {
          return state.pendingTurnStart === undefined ? state : withoutOpenTurn(state);
        }
        if (state.active === undefined) return state;
        return {
          ...withoutOpenTurn(state),
          settledMs: state.settledMs + Math.max(0, time - state.active.since),
        };
      default:
        // Every other event, built-in or not, extends an open turn (one in the same millisecond
        // changes nothing, and the state is kept as it is).
        if (state.active === undefined || state.active.through === time) return state;
        return { ...state, active: { since: state.active.since, through: time } };
    }
  },
  view: (state) =>
    state.active === undefined
      ? { settledMs: state.settledMs }
      : { settledMs: state.settledMs, active: { ...state.active } },
};

function withoutOpenTurn(state: SubagentTimingState): SubagentTimingState {
  return { version: 2, settledMs: state.settledMs, descriptorSeen: state.descriptorSeen };
}
