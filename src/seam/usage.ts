// What a child cost, folded from its own log: tokens from `assistant/message` usage, model requests
// (steps), turns, tool calls and wall time. One incremental fold serves results, budgets and the
// stored projection, so every place that reports usage counts the same way.
import { DESCRIPTOR_EVENT } from './descriptor.js';
import type { SessionProjection } from './projections.js';
import type { SessionEvent, SessionEventMap } from './session-types.js';
import type { SubagentUsage } from './usage-figures.js';

export type { SubagentUsage } from './usage-figures.js';

export interface SubagentUsageState {
  version: 1;
  inputTokens: number;
  outputTokens: number;
  requests: number;
  turns: number;
  toolCalls: number;
  /** Time of the first counted turn's start, and of the latest counted event. */
  since?: number;
  through?: number;
  /** Start of a turn seen before the descriptor; the descriptor adopts it (the child's own first turn). */
  pendingTurnStart?: number;
  descriptorSeen: boolean;
}

/** Usage with every figure 0. */
export function emptyUsage(): SubagentUsage {
  return { inputTokens: 0, outputTokens: 0, totalTokens: 0, requests: 0, turns: 0, toolCalls: 0, wallMs: 0 };
}

/** `a + b` as a figure: a sum stays a safe integer (as a child's own sums do), however many it adds up. */
const plus = (a: number, b: number): number => Math.min(Number.MAX_SAFE_INTEGER, a + b);

/** `a + b`, figure by figure (wall times add up too: a tree's figure is its members' busy time). */
export function addUsage(a: SubagentUsage, b: SubagentUsage): SubagentUsage {
  return {
    inputTokens: plus(a.inputTokens, b.inputTokens),
    outputTokens: plus(a.outputTokens, b.outputTokens),
    totalTokens: plus(a.totalTokens, b.totalTokens),
    requests: plus(a.requests, b.requests),
    turns: plus(a.turns, b.turns),
    toolCalls: plus(a.toolCalls, b.toolCalls),
    wallMs: plus(a.wallMs, b.wallMs),
  };
}

/** Adds `usage` to `sum` in place (tree totals summed over many rows, without an object per row). */
export function addUsageInto(sum: SubagentUsage, usage: SubagentUsage): void {
  sum.inputTokens = plus(sum.inputTokens, usage.inputTokens);
  sum.outputTokens = plus(sum.outputTokens, usage.outputTokens);
  sum.totalTokens = plus(sum.totalTokens, usage.totalTokens);
  sum.requests = plus(sum.requests, usage.requests);
  sum.turns = plus(sum.turns, usage.turns);
  sum.toolCalls = plus(sum.toolCalls, usage.toolCalls);
  sum.wallMs = plus(sum.wallMs, usage.wallMs);
}

/** `a - b`, figure by figure (what was spent between two readings of a growing log). */
export function subtractUsage(a: SubagentUsage, b: SubagentUsage): SubagentUsage {
  return {
    inputTokens: a.inputTokens - b.inputTokens,
    outputTokens: a.outputTokens - b.outputTokens,
    totalTokens: a.totalTokens - b.totalTokens,
    requests: a.requests - b.requests,
    turns: a.turns - b.turns,
    toolCalls: a.toolCalls - b.toolCalls,
    wallMs: a.wallMs - b.wallMs,
  };
}

/** Whether a step over an event of `type` changes a figure besides `through`. */
function counts(type: string): boolean {
  return type === 'turn/start' || type === 'step/start' || type === 'tool/call' || type === 'assistant/message';
}

function counted(state: SubagentUsageState, time: number): SubagentUsageState {
  return { ...state, through: Math.max(state.through ?? time, time) };
}

/**
 * Usage projection. Like the timing projection, what comes before the descriptor belongs to an
 * inherited prefix (a fork's seed, an ancestor's descriptor) and is not counted, except the turn
 * still open when the descriptor arrives; each descriptor restarts the count.
 */
export const subagentUsage: SessionProjection<SubagentUsageState, SubagentUsage> = {
  name: 'subagentUsage',
  version: 1,
  initial: () => ({ version: 1, inputTokens: 0, outputTokens: 0, requests: 0, turns: 0, toolCalls: 0, descriptorSeen: false }),
  step(state, event) {
    if (event.type === DESCRIPTOR_EVENT) {
      const since = state.pendingTurnStart ?? event.time;
      const open = state.pendingTurnStart !== undefined;
      const restarted: SubagentUsageState = { ...subagentUsage.initial(), turns: open ? 1 : 0, since, through: event.time, descriptorSeen: true };
      // The turn it arrived in stays open: its events extend the wall time until its end.
      if (state.pendingTurnStart !== undefined) restarted.pendingTurnStart = state.pendingTurnStart;
      return restarted;
    }
    if (!state.descriptorSeen) {
      if (event.type === 'turn/start') return { ...state, pendingTurnStart: event.time };
      if (event.type === 'turn/end' && state.pendingTurnStart !== undefined) {
        const { pendingTurnStart: _closed, ...rest } = state;
        return rest;
      }
      return state;
    }
    // The open turn is known after a descriptor too: a fork of a child inherits that child's
    // descriptor in its seed, and its own turn opens before its own descriptor restarts the count.
    if (event.type === 'turn/end' && state.pendingTurnStart !== undefined) {
      const { pendingTurnStart: _closed, ...rest } = state;
      return counted(rest, event.time);
    }
    // Most events change nothing but `through`, often not even that (the same millisecond): the
    // state is then returned as it is, which spares an object per event and fold. Between turns
    // (a notice given as context to a child whose result settled) they do not extend its wall time.
    if (!counts(event.type) && ((state.through !== undefined && state.through >= event.time) || (state.pendingTurnStart === undefined && event.type !== 'turn/end'))) {
      return state;
    }
    const next = counted(state, event.time);
    switch (event.type) {
      case 'turn/start':
        next.turns++;
        next.pendingTurnStart = event.time;
        break;
      case 'step/start':
        next.requests++;
        break;
      case 'tool/call':
        next.toolCalls++;
        break;
      case 'assistant/message': {
        const usage = (event.data as Partial<SessionEventMap['assistant/message']> | null)?.usage;
        if (usage && typeof usage === 'object') {
          // Sums stay safe integers (what a store can hold), however large the reported counts.
          next.inputTokens = Math.min(Number.MAX_SAFE_INTEGER, next.inputTokens + tokens(usage.inputTokens));
          next.outputTokens = Math.min(Number.MAX_SAFE_INTEGER, next.outputTokens + tokens(usage.outputTokens));
        }
        break;
      }
    }
    return next;
  },
  view: (state) => ({
    inputTokens: state.inputTokens,
    outputTokens: state.outputTokens,
    totalTokens: Math.min(Number.MAX_SAFE_INTEGER, state.inputTokens + state.outputTokens),
    requests: state.requests,
    turns: state.turns,
    toolCalls: state.toolCalls,
    wallMs: state.since === undefined || state.through === undefined ? 0 : Math.max(0, state.through - state.since),
  }),
};

/** A reported token count as a count: anything but a finite non-negative number counts 0. */
function tokens(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.round(value) : 0;
}

/**
 * The usage of `events` as a child's log (counted from its descriptor), or with `everything` of a
 * log that has no descriptor (a top-level agent's).
 */
export function usageOf(events: readonly SessionEvent[], opts?: { everything?: boolean }): SubagentUsage {
  let state = subagentUsage.initial();
  if (opts?.everything && events.length > 0) state = { ...state, descriptorSeen: true, since: events[0]!.time };
  for (const event of events) state = subagentUsage.step(state, event);
  return subagentUsage.view(state);
}

/** Incremental usage of a growing log (budgets check it at every step boundary). */
export class UsageMeter {
  #state = subagentUsage.initial();
  #seen: number;

  /** Counts `events` from index `from` on (a fork's seed is skipped). */
  constructor(from = 0) {
    this.#seen = from;
  }

  /** Usage of `events` so far; `events` is the same growing log at every call. */
  read(events: readonly SessionEvent[]): SubagentUsage {
    for (; this.#seen < events.length; this.#seen++) this.#state = subagentUsage.step(this.#state, events[this.#seen]!);
    return subagentUsage.view(this.#state);
  }
}
