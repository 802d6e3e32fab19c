// Budgets: limits on what a child (or its whole subtree) may spend, checked at step boundaries.
// A reached limit becomes a `subagent/budget` event in the child's log, which its result reads.
import { z } from 'zod';
import type { SubagentUsage } from './usage-figures.js';
import { parseOrThrow } from './parse.js';

/** Limits of a start request; `scope: 'tree'` makes them cover every descendant too. */
export interface SubagentBudget {
  /** Input + output tokens. */
  tokens?: number;
  turns?: number;
  /** Wall time from the start. */
  wallMs?: number;
  toolCalls?: number;
  /** @default 'child' */
  scope?: 'child' | 'tree';
}

export type BudgetLimit = 'tokens' | 'turns' | 'wallMs' | 'toolCalls';

/** A reached limit: which one, its value, the figure that reached it, and whose budget it was. */
export interface BudgetStop {
  limit: BudgetLimit;
  max: number;
  used: number;
  scope: 'child' | 'tree';
}

export const BUDGET_EVENT = 'subagent/budget';

const LIMITS: readonly BudgetLimit[] = ['tokens', 'turns', 'wallMs', 'toolCalls'];

// zod's int() also refuses integers past 2^53 − 1 (Number.MAX_VALUE among them): the message says both.
const limit = z.number().int('must be a whole number no larger than Number.MAX_SAFE_INTEGER').nonnegative('must not be negative');

export const budgetSchema = z.strictObject({
  tokens: limit.optional(),
  turns: limit.optional(),
  wallMs: limit.optional(),
  toolCalls: limit.optional(),
  scope: z.enum(['child', 'tree']).optional(),
});

/** A detached copy of `budget`; throws `INVALID_REQUEST` naming the bad field. */
export function parseBudget(budget: unknown, field = 'request.budget'): SubagentBudget {
  const parsed = parseOrThrow(budgetSchema, budget, 'INVALID_REQUEST', field, 'limits are whole numbers ≥ 0: tokens, turns, wallMs, toolCalls');
  const copy: SubagentBudget = {};
  // `-0 + 0` is 0: a negative zero would not survive the descriptor's JSON round trip.
  for (const key of LIMITS) if (parsed[key] !== undefined) copy[key] = parsed[key] + 0;
  if (parsed.scope !== undefined) copy.scope = parsed.scope;
  return copy;
}

/** The figure a limit is measured against. */
function figure(limit: BudgetLimit, usage: SubagentUsage, elapsedMs: number): number {
  switch (limit) {
    case 'tokens':
      return usage.totalTokens;
    case 'turns':
      return usage.turns;
    case 'wallMs':
      return elapsedMs;
    case 'toolCalls':
      return usage.toolCalls;
  }
}

/**
 * The limit `usage` has reached at a step boundary, if any. Tokens, tool calls and wall time are
 * reached at their value; turns when a turn beyond the limit has started (the open turn is counted).
 */
export function reachedLimit(budget: SubagentBudget, usage: SubagentUsage, elapsedMs: number): BudgetStop | undefined {
  const scope = budget.scope ?? 'child';
  for (const limit of LIMITS) {
    const max = budget[limit];
    if (max === undefined) continue;
    const used = figure(limit, usage, elapsedMs);
    if (limit === 'turns' ? used > max : used >= max) return { limit, max, used, scope };
  }
  return undefined;
}

/** What is left of `budget` after `usage`: one figure per limit it sets. */
export function remaining(budget: SubagentBudget, usage: SubagentUsage, elapsedMs: number): Partial<Record<BudgetLimit, number>> {
  const left: Partial<Record<BudgetLimit, number>> = {};
  for (const limit of LIMITS) {
    const max = budget[limit];
    if (max !== undefined) left[limit] = max - figure(limit, usage, elapsedMs);
  }
  return left;
}

/**
 * A tree budget covering a child that counts its own spend into the tree where it runs (a worker
 * thread): its limits, since when it runs, and what the whole tree has spent so far (see `treeSpend`).
 */
export interface TreeHeadroom {
  budget: SubagentBudget;
  startedAt: number;
  spent: BigInt64Array;
}

/**
 * The trees covering a resident child (a continuable worker child's stay), and `ahead`: the tokens
 * and tool calls it added to them where it runs that its host-side log does not show yet (a
 * `treeSpend` too). The service counts of that log only what `ahead` does not hold; turns it counts.
 */
export interface AheadTrees {
  trees: TreeHeadroom[];
  ahead: BigInt64Array;
}

// The figures of a tree's spend that limits read, one word each: wall time is read off the clock.
const TOKENS = 0;
const TURNS = 1;
const TOOL_CALLS = 2;

/**
 * A tree's spend over shared memory: each member adds what it logs (`addTreeSpend`), from any
 * thread and without waiting for an event loop, so every member's step boundary sees all of it.
 */
export function treeSpend(): BigInt64Array {
  return new BigInt64Array(new SharedArrayBuffer(3 * BigInt64Array.BYTES_PER_ELEMENT));
}

const word = (figure: number) => BigInt(Math.round(figure));

/** Adds `usage` (tokens, turns and tool calls) to a tree's shared spend. */
export function addTreeSpend(spent: BigInt64Array, usage: SubagentUsage): void {
  if (usage.totalTokens !== 0) Atomics.add(spent, TOKENS, word(usage.totalTokens));
  if (usage.turns !== 0) Atomics.add(spent, TURNS, word(usage.turns));
  if (usage.toolCalls !== 0) Atomics.add(spent, TOOL_CALLS, word(usage.toolCalls));
}

/**
 * Takes from `ahead` (spend a member counted into its trees itself, before its host's log showed
 * it) what of `usage` it holds, tokens and tool calls: returns the rest, what is still to count.
 */
export function takeAhead(ahead: BigInt64Array, usage: SubagentUsage): SubagentUsage {
  const take = (index: number, figure: number) => {
    const taken = Math.max(0, Math.min(Number(Atomics.load(ahead, index)), figure));
    if (taken > 0) Atomics.sub(ahead, index, word(taken));
    return figure - taken;
  };
  return { ...usage, totalTokens: take(TOKENS, usage.totalTokens), toolCalls: take(TOOL_CALLS, usage.toolCalls) };
}

/** A tree's shared spend as usage: the figures limits read; the others 0. */
export function readTreeSpend(spent: BigInt64Array): SubagentUsage {
  const totalTokens = Number(Atomics.load(spent, TOKENS));
  const turns = Number(Atomics.load(spent, TURNS));
  const toolCalls = Number(Atomics.load(spent, TOOL_CALLS));
  return { inputTokens: 0, outputTokens: 0, totalTokens, requests: 0, turns, toolCalls, wallMs: 0 };
}

/** The names of the limits a budget sets. */
export function limitsOf(budget: SubagentBudget): BudgetLimit[] {
  return LIMITS.filter((limit) => budget[limit] !== undefined);
}

/** The stop reason a reached limit gives: `max-tokens` for tokens, `aborted` for the others. */
export function budgetStopReason(stop: BudgetStop): 'max-tokens' | 'aborted' {
  return stop.limit === 'tokens' ? 'max-tokens' : 'aborted';
}

const BUDGET_DIAGNOSTIC_PREFIX = 'budget: ';

/** The diagnostic of a reached limit, e.g. `budget: tokens limit 500 reached (520 used, child budget)`. */
export function describeBudgetStop(stop: BudgetStop): string {
  return `${BUDGET_DIAGNOSTIC_PREFIX}${stop.limit} limit ${stop.max} reached (${stop.used} used, ${stop.scope} budget)`;
}

/** Whether a result's diagnostic is a budget's stop (`describeBudgetStop`), not a cancel. */
export function isBudgetDiagnostic(diagnostic: string | undefined): boolean {
  return diagnostic?.startsWith(BUDGET_DIAGNOSTIC_PREFIX) === true;
}

/** A `subagent/budget` event payload, or undefined when it is not one. */
export function budgetStopOf(data: unknown): BudgetStop | undefined {
  if (data === null || typeof data !== 'object') return undefined;
  const { limit, max, used, scope } = data as Record<string, unknown>;
  if (!LIMITS.includes(limit as BudgetLimit) || typeof max !== 'number' || typeof used !== 'number') return undefined;
  return { limit: limit as BudgetLimit, max, used, scope: scope === 'tree' ? 'tree' : 'child' };
}
